"""Print the codepoints Hugging Face tokenizers' NFC/NFD/NFKC/NFKD leave alone though Unicode gives
them a combining class, a decomposition or a composition: HF's normalization tables are older than
Python's ``unicodedata`` (and the ``regex`` package's). ``bpetok_hf/normalize.py`` holds the output
as ``HF_UNKNOWN`` and normalizes the text between those codepoints, which HF treats as plain
starters.

    python plugins/bpetok-hf/scripts/normalization_table.py
"""

from __future__ import annotations

import unicodedata

import regex
from tokenizers import normalizers

CANDIDATES = regex.compile(r"[\P{ccc=0}\P{dt=none}\p{NFC_QC=M}\p{NFKC_QC=M}]")
FORMS = {form: getattr(normalizers, form)() for form in ("NFC", "NFD", "NFKC", "NFKD")}


def hf_knows(c: str, composites: dict[str, list[str]]) -> bool:
    if unicodedata.category(c) == "Cn":
        return False  # newer than this Python's table, and HF's is older still
    probes = [c]
    if unicodedata.combining(c):
        probes += ["a" + c + "\u0334", "a\u0345" + c]  # ccc 1 and 240 on either side
    probes += [unicodedata.normalize("NFD", x) for x in composites.get(c, ())]
    return all(hf.normalize_str(p) == unicodedata.normalize(form, p) for p in probes for form, hf in FORMS.items())


def main() -> None:
    composites: dict[str, list[str]] = {}
    for cp in range(0x110000):
        x = chr(cp)
        if 0xD800 <= cp <= 0xDFFF:
            continue
        for part in set(unicodedata.normalize("NFD", x)) if unicodedata.decomposition(x) else ():
            composites.setdefault(part, []).append(x)
    unknown = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF and CANDIDATES.match(chr(cp))
               and not hf_knows(chr(cp), composites)]
    ranges: list[list[int]] = []
    for cp in unknown:
        if ranges and ranges[-1][1] == cp - 1:
            ranges[-1][1] = cp
        else:
            ranges.append([cp, cp])
    body = "".join(f"\\U{a:08X}" if a == b else f"\\U{a:08X}-\\U{b:08X}" for a, b in ranges)
    print(f"# {len(unknown)} codepoints; unicodedata {unicodedata.unidata_version}, regex {regex.__version__}")
    print(f'HF_UNKNOWN = "[{body}]"')


if __name__ == "__main__":
    main()
