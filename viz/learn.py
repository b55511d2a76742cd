"""The Learn tab: a short markdown explanation and one inline SVG illustration."""
from pathlib import Path

LEARN_MD = Path(__file__).with_name("learn.md")


def learn_markdown() -> str:
    try:
        return LEARN_MD.read_text()
    except OSError:
        return "Speculative decoding: a cheap model drafts tokens, the target verifies them in one pass."


def learn_figure() -> str:
    """Draft → verify → accept, drawn with the same classes as the live panels."""
    boxes = [("The", "tok-prompt", "prompt"), (" cat", "tok-acc", "accepted"), (" sat", "tok-acc", "accepted"),
             (" in", "tok-rej", "rejected"), (" on", "tok-bonus", "target")]
    spans = "".join(f'<span class="tok {c}" title="{t}">{w}</span>' for w, c, t in boxes)
    return (
        '<div class="speclens learn-panel"><div class="text-body" style="font-size:18px">' + spans + "</div>"
        '<ol class="source-note"><li>the drafter proposes “cat sat in”</li>'
        "<li>one target pass checks all three: it agrees with “cat sat”, disagrees with “in”</li>"
        "<li>the target's own choice “on” comes free with that pass: 3 tokens for 1 target pass</li></ol></div>"
    )
