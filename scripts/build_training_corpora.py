"""Build the training benchmark's corpora: the full texts the shared 4 MB corpora were cut from, and larger ones.

First install the sources (Debian/Ubuntu)::

    apt-get install python3-doc manpages-ja manpages-zh manpages-ru manpages-de manpages-fr

then::

    python scripts/build_training_corpora.py -o /work/corpora --synth 1e9 2e9

writes to the output folder (keep it out of the repository):

- ``en.txt``: the text of every page of Python's HTML documentation (``--html``, python3-doc's
  ``/usr/share/doc/python3/html``): script and style dropped, character references decoded,
  blank-line runs collapsed, pages concatenated in path order;
- ``code.txt``: every ``.py`` file of the standard library of the Python running this script
  (``--stdlib``), without ``test``/``tests``/``idle_test`` folders and ``site-packages``, in path order;
- ``multi.txt``: the man pages of ``--langs`` (default ja zh_CN ru de fr) under ``/usr/share/man``,
  decompressed, as roff source (``--man-format text`` strips the markup instead), language by
  language, each in path order;
- ``synth-<size>.txt`` for each ``--synth`` size in bytes: the three above, then varied copies of
  their documents until the size is reached (see :func:`varied_copy`).

These are the rules the shared corpora were cut by (``../shared/corpus``, 4,000,000 bytes each):
``code`` is the first 4,000,000 bytes of ``code.txt``, ``multi`` the first 800,000 bytes of each
language in turn, ``en`` the first 4,000,000 bytes of the pages in the file system's directory
order (``os.walk``; here the order is sorted, so that every machine builds the same file).
``--check ../shared/corpus`` verifies this.
"""

from __future__ import annotations

import argparse
import glob
import gzip
import html.parser
import lzma
import os
import random
import re
import sys
import sysconfig
import time
import zlib
from typing import Iterator

SKIPPED_FOLDERS = {"test", "tests", "idle_test", "site-packages", "__pycache__"}
LANGS = ("ja", "zh_CN", "ru", "de", "fr")


# -- the real corpora ----------------------------------------------------------------------------


class _PageText(html.parser.HTMLParser):
    """The text of an HTML page: every text node outside <script> and <style>, entities decoded."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.hidden = 0

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style"):
            self.hidden += 1

    def handle_endtag(self, tag):
        if tag in ("script", "style"):
            self.hidden = max(0, self.hidden - 1)

    def handle_data(self, data):
        if not self.hidden:
            self.parts.append(data)


def html_text(source: str) -> str:
    parser = _PageText()
    parser.feed(source)
    parser.close()
    return re.sub(r"\n\s*\n", "\n\n", "".join(parser.parts))


def read_text(path: str) -> str:
    with open(path, "rb") as f:
        data = f.read()
    if path.endswith(".gz"):
        data = gzip.decompress(data)
    return data.decode("utf-8", "replace")


def files_under(root: str, suffix: str, skip: set[str] = frozenset()) -> list[str]:
    """Files under ``root`` ending in ``suffix``, in sorted path order, skipping folders named in ``skip``."""
    found = []
    for rel in sorted(glob.glob("**/*" + suffix, root_dir=root, recursive=True)):
        path = os.path.join(root, rel)
        if os.path.isfile(path) and not skip.intersection(rel.split(os.sep)[:-1]):
            found.append(path)
    return found


def en_documents(root: str) -> Iterator[str]:
    for path in files_under(root, ".html"):
        yield html_text(read_text(path))


def code_documents(root: str) -> Iterator[str]:
    for path in files_under(root, ".py", SKIPPED_FOLDERS):
        yield read_text(path)


_ROFF_ESCAPE = re.compile(r"\\(?:f(?:\(..|\[[^]]*\]|.)|\((..)|\[([^]]*)\]|\*(?:\(..|.)|s[-+]?\d|(.))")
_ROFF_CHARS = {"em": "—", "en": "–", "hy": "-", "bu": "•", "co": "©", "lq": "“", "rq": "”", "aq": "'", ":u": "ü",
               ":a": "ä", ":o": "ö", "ss": "ß", "'e": "é", "`e": "è", "^e": "ê", ",c": "ç", "`a": "à", "dq": '"'}
_ROFF_TEXT_REQUESTS = {"B", "I", "BI", "BR", "IB", "IR", "RB", "RI", "SB", "SM", "SH", "SS", "IP", "TP", "Nm", "Nd"}


def _roff_escape(match: re.Match) -> str:
    two, named, single = match.groups()
    if two or named:
        return _ROFF_CHARS.get(two or named, "")
    if single is None:
        return ""  # a font, string or size change
    return {"-": "-", "e": "\\", "\\": "\\", " ": " ", "~": " ", "0": " "}.get(single, "")


def roff_text(source: str) -> str:
    """A man page's roff source as plain text: comments and layout requests dropped, escapes resolved."""
    out = []
    in_macro = False
    for line in source.split("\n"):
        if in_macro:
            in_macro = line.strip() != ".."
            continue
        if line.startswith((".\\\"", "'\\\"", '.\\"')):
            continue
        if line.startswith((".", "'")):
            request, _, rest = line[1:].strip().partition(" ")
            if request in ("de", "de1", "am"):
                in_macro = True
                continue
            if request not in _ROFF_TEXT_REQUESTS:
                continue
            line = rest.replace('"', "")
        out.append(_ROFF_ESCAPE.sub(_roff_escape, line))
    return "\n".join(out) + "\n"


def man_documents(root: str, lang: str, as_text: bool) -> Iterator[str]:
    # Links are followed (a page installed under two names is there twice), as in the shared cut.
    for path in files_under(os.path.join(root, lang), ""):
        page = read_text(path)
        yield roff_text(page) if as_text else page


# -- the varied copies ---------------------------------------------------------------------------

WORD = re.compile(r"[^\W\d_]{3,}")  # a run of three or more letters, any script
NUMBER = re.compile(r"\d+")
EDITS_PER_CHAR = 1 / 80  # about one edited word in 15
HEAPS_TAIL = 0.7  # the variant index's tail: P(index >= j) = j ** -HEAPS_TAIL


def variant(word: str, j: int, lexicon: list[str]) -> str:
    """The ``j``-th variant of ``word``: one deterministic edit, chosen by a hash of both.

    Edits are what text at scale is full of: a typo (letter swapped, doubled, dropped or replaced
    by another of the word's letters, so the script stays), another casing, or a compound
    identifier (``word`` + a capitalised lexicon word, as in ``parseHeaderValue``).
    """
    h = zlib.crc32(f"{j}\0{word}".encode("utf-8", "surrogatepass"))
    kind, h = h % 8, h >> 3
    n = len(word)
    i = 1 + h % (n - 1)
    if kind <= 1:
        return word[:i] + word[(h >> 8) % n] + word[i + 1:]
    if kind == 2 and i + 1 < n:
        return word[:i] + word[i + 1] + word[i] + word[i + 2:]
    if kind == 3:
        return word[:i] + word[i] + word[i:]
    if kind == 4:
        return word[:i] + word[i + 1:]
    if kind == 7:
        return word.upper() if h & 256 else word.capitalize()
    return word + lexicon[h % len(lexicon)].capitalize()


def varied_copy(document: str, rng: random.Random, lexicon: list[str]) -> str:
    """``document`` with about one word in 15 replaced by a :func:`variant` and its numbers redrawn.

    The variant index is drawn from a heavy-tailed (Pareto) law, so a word's common variants
    recur across copies while rarer ones keep appearing: the corpus's unique pieces grow
    sublinearly with its size (Heaps' law), as real text's do, instead of stopping (repeats) or
    growing linearly (random strings).
    """
    n = len(document)
    if n < 3:
        return document
    parts, done = [], 0
    for at in sorted(rng.randrange(n) for _ in range(int(n * EDITS_PER_CHAR) + 1)):
        if at < done:
            continue
        found = WORD.search(document, at) if rng.random() < 0.9 else NUMBER.search(document, at)
        if found is None:
            continue
        start, end = found.span()
        if found.re is WORD:
            j = int((1.0 - rng.random()) ** (-1 / HEAPS_TAIL))  # 1, 2, ... with a Pareto tail
            new = variant(found.group(), min(j, 1 << 30), lexicon)
        else:
            new = str(rng.randrange(10 ** (end - start)))
        parts += (document[done:start], new)
        done = end
    parts.append(document[done:])
    return "".join(parts)


def make_lexicon(documents: list[str], size: int = 1 << 16) -> list[str]:
    """The first ``size`` distinct words (of 3+ letters) of the corpus, for compound variants."""
    seen: dict[str, None] = {}
    for document in documents:
        for word in WORD.findall(document):
            seen.setdefault(word, None)
            if len(seen) >= size:
                return list(seen)
    return list(seen) or ["word"]


def synthetic_stream(documents: list[str]) -> Iterator[str]:
    """The documents as they are, then copy after copy of them shuffled (languages and kinds mixed) and varied."""
    yield from documents
    lexicon = make_lexicon(documents)
    copy = 1
    while True:
        rng = random.Random(f"bpetok synthetic copy {copy}")  # str seeds are stable across runs
        order = list(range(len(documents)))
        rng.shuffle(order)
        for k in order:
            yield varied_copy(documents[k], rng, lexicon)
        copy += 1


# -- writing ---------------------------------------------------------------------------------------


def write_documents(path: str, documents: Iterator[str]) -> int:
    size = 0
    with open(path + ".part", "w", encoding="utf-8", errors="replace", newline="") as f:
        for document in documents:
            f.write(document)
            size += len(document.encode("utf-8", "replace"))
    os.replace(path + ".part", path)
    return size


def write_synthetic(out: str, documents: list[str], sizes: list[int]) -> None:
    """Write ``synth-<size>.txt`` for each size: prefixes of one stream, each cut after a whole document."""
    sizes = sorted(sizes)
    names = [os.path.join(out, f"synth-{size / 1e9:g}g.txt") for size in sizes]
    files = [open(name + ".part", "w", encoding="utf-8", errors="replace", newline="") for name in names]
    written, started = 0, time.monotonic()
    try:
        for document in synthetic_stream(documents):
            for size, f in zip(sizes, files):
                if written < size:
                    f.write(document)
            written += len(document.encode("utf-8", "replace"))
            if written >= sizes[-1]:
                break
    finally:
        for f in files:
            f.close()
    for name, size in zip(names, sizes):
        os.replace(name + ".part", name)
        print(f"{name}: {os.path.getsize(name):,} bytes", file=sys.stderr)
    print(f"synthetic corpora written in {time.monotonic() - started:.0f} s", file=sys.stderr)


# -- checking against the shared cut ---------------------------------------------------------------


def check_shared(shared: str, out: str, man_pages: dict[str, list[str]], en_pages: list[str]) -> bool:
    """Whether the shared 4 MB corpora are cut from the ones built (see the module docstring)."""

    def shared_bytes(name: str) -> bytes:
        with lzma.open(os.path.join(shared, name + ".txt.xz")) as f:
            return f.read()

    ok = True
    with open(os.path.join(out, "code.txt"), "rb") as f:
        code = shared_bytes("code")
        ok &= report("code", f.read(len(code)) == code)
    multi = shared_bytes("multi")
    slice_size = len(multi) // len(man_pages)
    with open(os.path.join(out, "multi.txt"), "rb") as f:
        data = f.read()
    start = 0
    for i, (lang, pages) in enumerate(man_pages.items()):
        size = sum(len(p.encode("utf-8", "replace")) for p in pages)
        ok &= report(f"multi/{lang}", data[start:start + slice_size] == multi[i * slice_size:(i + 1) * slice_size])
        start += size
    # en: the shared text is whole pages in some directory order (the last one cut); match them greedily.
    en = shared_bytes("en").decode("utf-8", "replace")
    pages: dict[str, list[str]] = {}
    for page in en_pages:
        pages.setdefault(page[:400], []).append(page)
    at = 0
    while at < len(en):
        candidates = pages.get(en[at:at + 400], [])
        page = next((p for p in candidates if en.startswith(p, at)), None)
        if page is None:
            break
        at += len(page)
    ok &= report("en", len(en) - at < max((len(p) for p in en_pages), default=0) and en[at:] in "".join(en_pages))
    return ok


def report(name: str, same: bool) -> bool:
    print(f"{name}: {'the shared corpus is cut from it' if same else 'DIFFERS from the shared corpus'}", file=sys.stderr)
    return same


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--out", required=True, help="output folder (outside the repository)")
    parser.add_argument("--html", default="/usr/share/doc/python3/html", help="Python's HTML documentation")
    parser.add_argument("--stdlib", default=sysconfig.get_paths()["stdlib"], help="a Python standard library")
    parser.add_argument("--man", default="/usr/share/man", help="the man page root")
    parser.add_argument("--langs", nargs="+", default=list(LANGS), help="man page languages")
    parser.add_argument("--man-format", choices=("roff", "text"), default="roff",
                        help="roff source (what the shared multi corpus is) or text with the markup stripped")
    parser.add_argument("--synth", nargs="*", type=float, default=[], metavar="BYTES",
                        help="also write synthetic corpora of these sizes, e.g. 1e9 2e9")
    parser.add_argument("--check", metavar="SHARED_CORPUS_DIR", help="verify the shared 4 MB corpora are cut from these")
    args = parser.parse_args(argv)
    for path, package in ((args.html, "python3-doc"), (args.stdlib, "python3"), (args.man, "man-db")):
        if not os.path.isdir(path):
            parser.error(f"{path}: not found; install {package} (apt-get install {package})")
    for lang in args.langs:
        if not os.path.isdir(os.path.join(args.man, lang)):
            parser.error(f"{os.path.join(args.man, lang)}: no man pages; apt-get install manpages-{lang.split('_')[0]}")
    os.makedirs(args.out, exist_ok=True)
    started = time.monotonic()
    en = list(en_documents(args.html))
    code = list(code_documents(args.stdlib))
    man_pages = {lang: list(man_documents(args.man, lang, args.man_format == "text")) for lang in args.langs}
    multi = [page for pages in man_pages.values() for page in pages]
    for name, documents in (("en", en), ("code", code), ("multi", multi)):
        size = write_documents(os.path.join(args.out, name + ".txt"), iter(documents))
        print(f"{os.path.join(args.out, name + '.txt')}: {size:,} bytes, {len(documents):,} documents", file=sys.stderr)
    print(f"real corpora written in {time.monotonic() - started:.0f} s", file=sys.stderr)
    if args.check and not check_shared(args.check, args.out, man_pages, en):
        return 1
    if args.synth:
        write_synthetic(args.out, en + code + multi, [int(s) for s in args.synth])
    return 0


if __name__ == "__main__":
    sys.exit(main())
