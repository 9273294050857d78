#!/usr/bin/env python3
"""Writes the loader's test fixtures into tests/data/ (pure stdlib).

    python3 tools/make_bad_safetensors.py [OUT_DIR]

A few tiny valid files (good_*.safetensors) and one malformed file per
rejection the loader must make (bad_*.safetensors), plus expected_errors.txt:
one line per bad file, "<file> <substring the error must contain>". Output
is deterministic: rerunning reproduces the checked-in bytes exactly.
"""
import json
import os
import struct
import sys

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data")

# bits per element of every dtype the format defines (the official reader's list)
BITS = {"BOOL": 8, "U8": 8, "I8": 8, "I32": 32, "I64": 64, "F16": 16, "BF16": 16, "F32": 32, "F64": 64, "F8_E4M3": 8,
        "F8_E5M2": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16,
        "U16": 16, "U32": 32, "U64": 64, "C64": 64}


def raw(header: bytes, data: bytes = b"", length=None) -> bytes:
    """8-byte LE length + header bytes as given (no padding) + data."""
    return struct.pack("<Q", len(header) if length is None else length) + header + data


def padded(header: str, data: bytes = b"") -> bytes:
    """Header padded with spaces to a multiple of 8, as the official writer does."""
    h = header.encode()
    h += b" " * (-len(h) % 8)
    return raw(h, data)


def entry(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def build(tensors, meta=None):
    """tensors: [(name, dtype, shape, bytes)] laid out contiguously in order."""
    hdr, data = {}, b""
    if meta is not None:
        hdr["__metadata__"] = meta
    for name, dtype, shape, b in tensors:
        n = 1
        for d in shape:
            n *= d
        assert len(b) * 8 == n * BITS[dtype], name
        hdr[name] = entry(dtype, shape, len(data), len(data) + len(b))
        data += b
    return padded(json.dumps(hdr, separators=(",", ":"), ensure_ascii=False), data)


def one(hdr_obj, data):
    return padded(json.dumps(hdr_obj, separators=(",", ":")), data)


GOOD = {
    # every supported dtype, a scalar, and a header padded with spaces
    "good_small.safetensors": build([
        ("bool", "BOOL", [3], bytes([1, 0, 1])),
        ("u8", "U8", [2, 2], bytes([0, 1, 254, 255])),
        ("i8", "I8", [2], struct.pack("<2b", -128, 127)),
        ("i32", "I32", [3], struct.pack("<3i", -1, 0, 2147483647)),
        ("i64", "I64", [1], struct.pack("<q", -(2**40))),
        ("f16", "F16", [2], struct.pack("<2H", 0x3C00, 0xC000)),  # 1.0, -2.0
        ("bf16", "BF16", [1, 3], struct.pack("<3H", 0x3F80, 0x4049, 0xFF80)),  # 1.0, 3.140625, -inf
        ("f32", "F32", [2, 1], struct.pack("<2f", 0.5, -1e30)),
        ("f64", "F64", [1], struct.pack("<d", 1.0 / 3.0)),
        ("e4m3", "F8_E4M3", [4], bytes([0x38, 0x7E, 0x01, 0xFF])),  # 1.0, 448, min subnormal, NaN
        ("e5m2", "F8_E5M2", [4], bytes([0x3C, 0x7B, 0x7C, 0x80])),  # 1.0, 57344, inf, -0
        ("scalar", "F32", [], struct.pack("<f", 7.0)),
    ]),
    "good_meta.safetensors": build(
        [("blocks.0.norm1.weight", "BF16", [4], struct.pack("<4H", 0x3F80, 0x3F80, 0x4000, 0x4040))],
        meta={"format": "pt", "note": 'quote " backslash \\ caf\u00e9', "empty": ""}),
    # zero-size tensors (begin == end) at the start, middle and end
    "good_empty_tensor.safetensors": build([
        ("empty0", "F32", [0, 3], b""),
        ("a", "F32", [2], struct.pack("<2f", 1.0, 2.0)),
        ("empty1", "BF16", [4, 0], b""),
        ("b", "U8", [3], bytes([7, 8, 9])),
        ("empty2", "I64", [0], b""),
    ]),
    "good_no_tensors.safetensors": padded("{}"),
    # the dtypes h3block never reads but the format defines (and the official
    # reader loads): extras of these in a block file are ignored, not refused
    "good_dtypes_other.safetensors": build([
        ("u16", "U16", [2], struct.pack("<2H", 1, 65535)),
        ("u32", "U32", [1], struct.pack("<I", 4000000000)),
        ("u64", "U64", [1], struct.pack("<Q", 2**64 - 1)),
        ("i16", "I16", [2], struct.pack("<2h", -32768, 32767)),
        ("e8m0", "F8_E8M0", [2], bytes([0x7F, 0x80])),  # 2^0, 2^1
        ("e4m3fnuz", "F8_E4M3FNUZ", [1], bytes([0x40])),
        ("e5m2fnuz", "F8_E5M2FNUZ", [1], bytes([0x40])),
        ("c64", "C64", [1], struct.pack("<2f", 1.0, -1.0)),
        ("f4", "F4", [4], bytes([0x21, 0x43])),  # four 4-bit codes in two bytes
        ("f6a", "F6_E2M3", [4], bytes([1, 2, 3])),  # four 6-bit codes in three bytes
        ("f6b", "F6_E3M2", [4], bytes([4, 5, 6])),
    ]),
    # a header of odd length (no padding), so the data region starts at an odd
    # file offset; the official reader accepts it
    "good_odd_header.safetensors": raw(b'{"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}}',
                                       struct.pack("<2H", 0x3F80, 0x4000)),
    # a character outside the BMP written as a surrogate pair escape (valid JSON)
    "good_surrogate_pair.safetensors": padded('{"a\\ud83d\\ude00":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}',
                                              b"\x07"),
    # tensors listed out of offset order; no padding; whitespace inside JSON
    "good_unordered.safetensors": raw(
        b'{ "second" : {"dtype":"U8","shape":[2],"data_offsets":[4,6]},\n\t"first":{"data_offsets":[0,4],'
        b'"shape":[1],"dtype":"F32"}}', struct.pack("<f", 2.5) + bytes([1, 2])),
}

F32x2 = struct.pack("<2f", 1.0, 2.0)  # 8 bytes
BAD = []  # (file, bytes, expected substring)


def bad(name, content, expect):
    BAD.append((name, content, expect))


bad("bad_empty_file.safetensors", b"", "too short")
bad("bad_short.safetensors", b"\x10\x00\x00\x00\x00", "too short")
# A length past both the 100 MB limit and the file is no header length at all (a length past
# the limit alone, in a file larger than it, keeps its own message: test_safetensors makes one).
NOT_ST = "not a safetensors file (its first 8 bytes are not a plausible header length)"
bad("bad_header_too_big.safetensors", raw(b"{}", length=100_000_001), NOT_ST)
bad("bad_text_file.safetensors", b"# h3block\n\nOne MiniMax-H3 video-diffusion DiT block on an NVIDIA GPU.\n", NOT_ST)
bad("bad_header_past_eof.safetensors", raw(b"{}", length=1000), "runs past the end of the file")
bad("bad_empty_header.safetensors", raw(b""), "not a JSON object")
bad("bad_not_object.safetensors", padded("[1, 2]"), "not a JSON object")
bad("bad_leading_space.safetensors", padded(' {"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', F32x2), "not a JSON object")
bad("bad_json.safetensors", padded('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],}}', F32x2), "invalid JSON")
bad("bad_json_truncated.safetensors", padded('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}', F32x2), "invalid JSON")
bad("bad_json_single_quote.safetensors", padded("{'a':{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", F32x2), "invalid JSON")
bad("bad_json_nan.safetensors", padded('{"a":{"dtype":"F32","shape":[NaN],"data_offsets":[0,8]}}', F32x2), "invalid JSON")
bad("bad_json_trailing_garbage.safetensors", padded('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}} x', F32x2), "trailing characters")
bad("bad_header_nul_padding.safetensors", raw(b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}\0\0', F32x2), "invalid JSON")
bad("bad_control_char.safetensors", padded('{"a\nb":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', F32x2), "control character")
bad("bad_nul_escape.safetensors", padded('{"a\\u0000b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', F32x2), "\\u0000")
bad("bad_utf8.safetensors", raw(b'{"a\xffb":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', F32x2), "utf-8")
# strict UTF-8 as serde_json (the official reader) has it; json-c lets these through
bad("bad_utf8_overlong.safetensors", raw(b'{"a\xc0\xafb":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', F32x2), "invalid utf-8")
bad("bad_utf8_surrogate.safetensors", raw(b'{"a\xed\xa0\x80b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', F32x2), "invalid utf-8")
bad("bad_utf8_above_max.safetensors", raw(b'{"a\xf4\x90\x80\x80b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', F32x2), "invalid utf-8")
bad("bad_lone_surrogate_escape.safetensors", padded('{"a\\ud800b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', F32x2), "lone high surrogate")
bad("bad_lone_low_surrogate_escape.safetensors", padded('{"a\\udc00b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', F32x2), "lone low surrogate")
bad("bad_lone_surrogate_meta.safetensors", padded('{"__metadata__":{"k":"\\ud800"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', F32x2), "lone high surrogate")
bad("bad_shape_minus_zero.safetensors", padded('{"a":{"dtype":"F32","shape":[2,-0],"data_offsets":[0,0]}}'), "-0 is not a size")
bad("bad_offset_minus_zero.safetensors", padded('{"a":{"dtype":"F32","shape":[2],"data_offsets":[-0,8]}}', F32x2), "-0 is not a size")
bad("bad_deep.safetensors", padded('{"a":{"dtype":"F32","shape":' + "[" * 40 + "]" * 40 + ',"data_offsets":[0,0]}}'), "nesting too deep")
bad("bad_entry_not_object.safetensors", padded('{"a":[0,8]}', F32x2), "tensor 'a': entry is not an object")
bad("bad_dtype.safetensors", one({"a": entry("F17", [2], 0, 8)}, F32x2), "tensor 'a': unknown dtype 'F17'")
bad("bad_dtype_lowercase.safetensors", one({"a": entry("u16", [4], 0, 8)}, F32x2), "tensor 'a': unknown dtype 'u16'")
bad("bad_f4_partial_byte.safetensors", one({"a": entry("F4", [3], 0, 2)}, F32x2[:2]), "tensor 'a': its bits do not fill whole bytes")
bad("bad_dtype_not_string.safetensors", one({"a": entry(4, [2], 0, 8)}, F32x2), "tensor 'a': dtype is not a string")
bad("bad_rank9.safetensors", one({"a": entry("U8", [1] * 8 + [8], 0, 8)}, F32x2), "tensor 'a': rank 9 exceeds")
bad("bad_negative_shape.safetensors", one({"a": entry("F32", [-1, -2], 0, 8)}, F32x2), "tensor 'a': shape[0] is negative")
bad("bad_float_shape.safetensors", one({"a": entry("F32", [2.0], 0, 8)}, F32x2), "tensor 'a': shape[0] is not an integer")
bad("bad_string_shape.safetensors", one({"a": entry("F32", [1, "2"], 0, 8)}, F32x2), "tensor 'a': shape[1] is not an integer")
bad("bad_shape_not_array.safetensors", one({"a": entry("F32", 2, 0, 8)}, F32x2), "tensor 'a': shape is not an array")
bad("bad_float_offset.safetensors", one({"a": entry("F32", [2], 0, 8.0)}, F32x2), "tensor 'a': data_offsets[1] is not an integer")
bad("bad_exp_offset.safetensors", padded('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8e0]}}', F32x2), "tensor 'a': data_offsets[1] is not an integer")
bad("bad_negative_offset.safetensors", one({"a": entry("F32", [2], -8, 0)}, F32x2), "tensor 'a': data_offsets[0] is negative")
bad("bad_offsets_three.safetensors", one({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8, 8]}}, F32x2), "tensor 'a': data_offsets is not an array of two integers")
bad("bad_missing_dtype.safetensors", one({"a": {"shape": [2], "data_offsets": [0, 8]}}, F32x2), "tensor 'a': missing field 'dtype'")
bad("bad_missing_shape.safetensors", one({"a": {"dtype": "F32", "data_offsets": [0, 8]}}, F32x2), "tensor 'a': missing field 'shape'")
bad("bad_missing_offsets.safetensors", one({"a": {"dtype": "F32", "shape": [2]}}, F32x2), "tensor 'a': missing field 'data_offsets'")
bad("bad_extra_field.safetensors", one({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8], "foo": 1}}, F32x2), "tensor 'a': unknown field 'foo'")
bad("bad_duplicate_field.safetensors", padded('{"a":{"dtype":"F32","shape":[2],"dtype":"I32","data_offsets":[0,8]}}', F32x2), "tensor 'a': entry has a duplicate field")
bad("bad_begin_gt_end.safetensors", one({"a": entry("U8", [0], 8, 0)}, F32x2), "tensor 'a': data_offsets [8, 0): begin > end")
bad("bad_end_past_data.safetensors", one({"a": entry("F32", [4], 0, 16)}, F32x2), "tensor 'a': data_offsets [0, 16) end past the data region")
bad("bad_size_mismatch.safetensors", one({"a": entry("F32", [3], 0, 8)}, F32x2), "tensor 'a': byte size mismatch")
bad("bad_overlap.safetensors", one({"blocks.0.norm1.weight": entry("F32", [2], 0, 8),
                                    "blocks.0.mlp.fc1.weight": entry("U8", [4], 4, 8)}, F32x2),
    "tensor 'blocks.0.mlp.fc1.weight': data_offsets [4, 8) overlap 'blocks.0.norm1.weight'")
bad("bad_overlap_empty.safetensors", one({"a": entry("F32", [2], 0, 8), "z": entry("F32", [0], 4, 4)}, F32x2),
    "tensor 'z': data_offsets [4, 4) overlap 'a'")
bad("bad_gap.safetensors", one({"a": entry("U8", [2], 0, 2), "b": entry("U8", [4], 4, 8)}, F32x2),
    "tensor 'b': data_offsets [4, 8) leave a gap")
bad("bad_leading_gap.safetensors", one({"a": entry("U8", [4], 4, 8)}, F32x2), "tensor 'a': data_offsets [4, 8) leave a gap")
bad("bad_duplicate.safetensors", padded('{"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},'
                                        '"w":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}}', F32x2),
    "tensor 'w': duplicate name")
bad("bad_duplicate_escaped.safetensors", padded('{"ab":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},'
                                                '"a\\u0062":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}}', F32x2),
    "tensor 'ab': duplicate name")
bad("bad_trailing.safetensors", one({"a": entry("F32", [2], 0, 8)}, F32x2 + b"\0\0\0\0"), "4 trailing data bytes")
bad("bad_trailing_no_tensors.safetensors", padded("{}", b"\0"), "1 trailing data bytes")
bad("bad_overflow.safetensors", one({"a": entry("U8", [2**32, 2**32, 2**32], 0, 8)}, F32x2), "tensor 'a': element count or byte size overflows")
bad("bad_bytes_overflow.safetensors", one({"a": entry("F64", [2**62], 0, 8)}, F32x2), "tensor 'a': element count or byte size overflows")
bad("bad_huge_int.safetensors", padded('{"a":{"dtype":"F32","shape":[100000000000000000000000],"data_offsets":[0,8]}}', F32x2), "tensor 'a': shape[0] is out of range")
bad("bad_huge_offset.safetensors", padded('{"a":{"dtype":"U8","shape":[8],"data_offsets":[0,18446744073709551624]}}', F32x2), "tensor 'a': data_offsets[1] is out of range")
bad("bad_meta_not_string.safetensors", one({"__metadata__": {"k": 1}, "a": entry("F32", [2], 0, 8)}, F32x2), "__metadata__ 'k' is not a string")
bad("bad_meta_not_object.safetensors", one({"__metadata__": "pt", "a": entry("F32", [2], 0, 8)}, F32x2), "__metadata__ is not an object")
bad("bad_meta_duplicate.safetensors", padded('{"__metadata__":{"k":"1","k":"2"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', F32x2), "__metadata__ has a duplicate key")


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, content in GOOD.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(content)
    lines = []
    for name, content, expect in BAD:
        assert len(content) < 1024, name
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(content)
        lines.append(f"{name} {expect}\n")
    with open(os.path.join(OUT, "expected_errors.txt"), "w") as f:
        f.write("# <file> <substring the loader's error must contain> (written by tools/make_bad_safetensors.py)\n")
        f.writelines(lines)
    print(f"wrote {len(GOOD)} good and {len(BAD)} bad files to {OUT}")


if __name__ == "__main__":
    main()
