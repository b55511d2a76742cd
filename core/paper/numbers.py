"""How the report writes numbers: a Markdown table of rows, one value, a span of values."""


def md_table(rows, cols) -> str:
    if not rows:
        return "_(no rows: not run in this selection)_\n"
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def fmt(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def span(xs, fmt="{:.3g}") -> str:
    xs = [x for x in xs if isinstance(x, (int, float))]
    return "n/a" if not xs else fmt.format(min(xs)) if min(xs) == max(xs) else f"{fmt.format(min(xs))}–{fmt.format(max(xs))}"
