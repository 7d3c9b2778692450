#!/usr/bin/env python3
"""fuzz_seeds.py IN.rbt OUT - rewrites a trace with every chunk's zstd frame stored
as raw (uncompressed) blocks, checksums fixed, so that the fuzzer's byte mutations
land on encoded events instead of on compressed bits. The result is a valid trace
(FORMAT.md allows any zstd frame). Used once to make tests/fuzz_corpus/ seeds."""
import struct
import subprocess
import sys


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


def raw_frame(raw):
    out = struct.pack("<IB", 0xFD2FB528, 0xA0) + struct.pack("<I", len(raw))
    pos = 0
    while True:
        block = raw[pos:pos + 65536]
        pos += len(block)
        last = 1 if pos >= len(raw) else 0
        hdr = last | (0 << 1) | (len(block) << 3)
        out += struct.pack("<I", hdr)[:3] + block
        if last:
            return out


def main():
    data = open(sys.argv[1], "rb").read()
    body_len = struct.unpack_from("<I", data, 16)[0]
    off = 24 + body_len
    out = bytearray(data[:off])
    while off < len(data):
        magic = struct.unpack_from("<I", data, off)[0]
        if magic != 0x4B434252:  # not a chunk: the trailer, copied as is
            out += data[off:]
            break
        comp_len, raw_len, events, stream, flags, first, last, dcrc, hcrc = \
            struct.unpack_from("<IIIIIQQII", data, off + 4)
        frame = data[off + 48:off + 48 + comp_len]
        raw = subprocess.run(["zstd", "-dc"], input=frame, capture_output=True,
                             check=True).stdout
        assert len(raw) == raw_len
        nf = raw_frame(raw)
        hdr = struct.pack("<IIIIIIQQI", 0x4B434252, len(nf), raw_len, events, stream,
                          flags, first, last, crc32c(nf))
        out += hdr + struct.pack("<I", crc32c(hdr)) + nf
        off += 48 + comp_len
    open(sys.argv[2], "wb").write(out)


main()
