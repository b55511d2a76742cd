"""python -m core maps check|compare: the token-map doctor.

    check FILE… --model M [--fix OUT] [--json]
        named findings per file; exit status 1 if any file has an error, 0 with warnings only
    compare FILE… --model M [--prompts FILES] [--prompt-tokens] [--accept] [--json]
        coverage per prompt category of each map, FR-Spec's shipped table at the same size and NanoSpec's
        dynamic I_t; with --accept, the acceptance length of the full draft head restricted to each map
"""
import argparse
import json
import sys

from core.errors import SpecError
from core.prompts import DEFAULT_PROMPTS

SEVERITY_MARK = {"error": "ERROR", "warning": "warn "}


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m core maps", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="named findings per map file")
    c.add_argument("files", nargs="+", metavar="FILE", help=".pt / .json / .safetensors map, or a checkpoint directory")
    c.add_argument("--model", default=None, help="offline alias or Hugging Face id (default: smollm2-135m-instruct)")
    c.add_argument("--fix", default=None, metavar="OUT", help="write the repaired map (one FILE; .pt, .json or .safetensors)")
    c.add_argument("--json", action="store_true")
    m = sub.add_parser("compare", help="coverage (and acceptance) of maps side by side")
    m.add_argument("files", nargs="+", metavar="FILE")
    m.add_argument("--model", default=None)
    m.add_argument("--prompts", nargs="+", default=[str(DEFAULT_PROMPTS)], metavar="FILE")
    m.add_argument("--prompt-tokens", action="store_true",
                   help="coverage of the tokenized prompts (fast), not of the target's greedy outputs")
    m.add_argument("--candidates", action="store_true",
                   help="with --prompt-tokens: NanoSpec's I_t also holds the target's top-K_pre at each prompt position")
    m.add_argument("--per-category", type=int, default=None, metavar="N", help="at most N prompts per category")
    m.add_argument("--max-new-tokens", type=int, default=64, metavar="N", help="greedy tokens per prompt (outputs)")
    m.add_argument("--accept", action="store_true", help="also measure acceptance with each map (our engine)")
    m.add_argument("--accept-prompts", type=int, default=7, metavar="N", help="prompts for --accept (one per category first)")
    m.add_argument("--accept-tokens", type=int, default=64, metavar="N")
    m.add_argument("--threads", type=int, default=None)
    m.add_argument("--json", action="store_true")
    return p.parse_args(argv)


def check_file(path, facts) -> tuple[dict, object]:
    from core.maps.check import report
    from core.maps.formats import MapReadError, read_path
    try:
        m = read_path(path)
    except MapReadError as err:
        return report(str(path), None, facts, err), None
    return report(str(path), m, facts), m


def print_report(rep: dict) -> None:
    size = f"{rep['size']} ids" if rep["size"] is not None else "no ids"
    print(f"{rep['file']}: {rep['format'] or 'unread'}, {size}, model {rep['model']} (V = {rep['vocab_size']}): "
          f"{rep['status'].upper()}")
    for x in rep["findings"]:
        print(f"  {SEVERITY_MARK[x['severity']]} {x['code']}: {x['message']}")


def run_check(args) -> int:
    from core.maps.fix import fix_to
    from core.maps.model import load_facts
    from core.models import DEFAULT_MODEL
    if args.fix and len(args.files) != 1:
        raise SpecError("--fix OUT repairs one FILE at a time")
    facts = load_facts(args.model or DEFAULT_MODEL)
    reports, maps = zip(*(check_file(path, facts) for path in args.files))
    if args.json:
        print(json.dumps(list(reports), indent=1))
    else:
        for rep in reports:
            print_report(rep)
    if args.fix:
        if maps[0] is None:
            raise SpecError(f"{args.files[0]}: not repaired (the file could not be read)")
        for change in fix_to(maps[0], facts, args.fix):
            print(f"fix: {change}", file=sys.stderr)
        print(f"fix: wrote {args.fix}", file=sys.stderr)
    return 1 if any(r["status"] == "error" for r in reports) else 0


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.command == "check":
        return run_check(args)
    from core.maps.compare import run_compare
    return run_compare(args)
