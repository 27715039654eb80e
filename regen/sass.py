"""Instruction checks on a disassembly: which mnemonics each kernel's machine code contains.

A spec can require that its kernel really uses an instruction class (HGMMA for wgmma on Hopper,
UTC*MMA for tcgen05 on Blackwell, v_mfma on CDNA); a kernel that compiles and passes the oracle
through a slow path fails the check. The parser is generic over disassembler formats, since every
one of them prints "opcode operands" lines per function:

    cuobjdump --dump-sass / nvdisasm    Function : name | .text.name:   then   /*0040*/  @P0 HGMMA.64x8x16.F32.BF16 ... ;
    llvm-objdump -d (AMDGPU, x86)       0000000000001600 <name>:        then   <tab>v_mfma_f32_16x16x16_bf16 v[2:5], ...  // 000000001634: D3E1...
                                                                       or     1634:<tab>d3 e1 ...<tab>opcode operands
Mnemonics keep their modifiers (HGMMA.64x8x16.F32.BF16); a required entry matches by prefix,
case-insensitively, so "HGMMA" matches every HGMMA form and "v_mfma" every MFMA.
"""

from __future__ import annotations

import re
from collections import Counter

_FUNCTION_HEADERS = (
    re.compile(r"^\s*Function\s*:\s*(\S+)"),                  # cuobjdump
    re.compile(r"^\s*\.text\.(\S+?):\s*$"),                    # nvdisasm
    re.compile(r"^(?:[0-9a-fA-F]+\s+)?<([^>]+)>:\s*$"),        # llvm-objdump / objdump
)
_SASS_LINE = re.compile(r"^\s*/\*[0-9a-fA-F]+\*/\s+(.*)$")
_ADDRESS_PREFIX = re.compile(r"^\s*[0-9a-fA-F]+:\s*")
_RAW_BYTES = re.compile(r"^(?:[0-9a-fA-F]{2,8}\s)+\s*$")
_MNEMONIC = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")
_PREDICATE = re.compile(r"^@!?\w+$")
UNKNOWN_FUNCTION = "?"


def _mnemonic_of_sass(body: str) -> str | None:
    body = body.split(";", 1)[0].strip().lstrip("{").strip()
    tokens = body.split()
    if tokens and _PREDICATE.match(tokens[0]):
        tokens = tokens[1:]
    if tokens and _MNEMONIC.match(tokens[0]):
        return tokens[0]
    return None


def _mnemonic_of_objdump(line: str) -> str | None:
    """An indented instruction line of llvm-objdump/objdump, with or without address and bytes."""
    if not line[:1].isspace():
        return None
    code = line.split("//", 1)[0]
    if _ADDRESS_PREFIX.match(code):
        fields = _ADDRESS_PREFIX.sub("", code, count=1).split("\t")
        if _RAW_BYTES.match(fields[0] + " "):
            if len(fields) == 1:
                return None  # a continuation line of instruction bytes
            fields = fields[1:]
        code = "\t".join(fields)
    tokens = code.split()
    if tokens and _MNEMONIC.match(tokens[0]) and not tokens[0].startswith("."):
        return tokens[0]
    return None


def parse(disassembly: str) -> dict[str, Counter]:
    """Function name -> Counter of mnemonics. Instructions before any header count under "?"."""
    functions: dict[str, Counter] = {}
    current = UNKNOWN_FUNCTION
    for line in disassembly.splitlines():
        header = next((m.group(1) for p in _FUNCTION_HEADERS if (m := p.match(line))), None)
        if header is not None:
            current = header
            functions.setdefault(current, Counter())
            continue
        sass = _SASS_LINE.match(line)
        if sass:
            mnemonic = _mnemonic_of_sass(sass.group(1))
        elif current != UNKNOWN_FUNCTION:
            mnemonic = _mnemonic_of_objdump(line)
        else:
            mnemonic = None
        if mnemonic:
            functions.setdefault(current, Counter())[mnemonic] += 1
    return functions


def mnemonic_counts(disassembly: str, kernel: str | None = None) -> Counter:
    """Mnemonic counts of one kernel, or of the whole binary when kernel is None."""
    functions = parse(disassembly)
    if kernel is not None:
        return Counter(functions.get(kernel, Counter()))
    total: Counter = Counter()
    for counts in functions.values():
        total.update(counts)
    return total


def count_matching(counts: Counter, prefix: str) -> int:
    """How many instructions start with prefix (case-insensitive)."""
    p = prefix.lower()
    return sum(n for mnemonic, n in counts.items() if mnemonic.lower().startswith(p))


def missing_instructions(disassembly: str, required: list[str],
                         kernel: str | None = None) -> list[str]:
    """The required prefixes that no instruction of the kernel (or binary) starts with."""
    counts = mnemonic_counts(disassembly, kernel)
    return [r for r in required if count_matching(counts, r) == 0]
