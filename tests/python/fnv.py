"""fnv.py — FNV-1a 64 as 16 hex digits, the hash st_tool prints per tensor and dit_block's report
gives a file's header (core/safetensors.h, st_fnv1a64), computed here independently."""


def fnv1a64(b):
    h = 0xCBF29CE484222325
    for x in b:
        h = ((h ^ x) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"
