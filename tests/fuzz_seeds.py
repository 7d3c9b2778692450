#!/usr/bin/env python3
"""fuzz_seeds.py IN.rbt OUT - rewrites a trace with every chunk's zstd frame stored
as raw (uncompressed) blocks, checksums fixed, so that the fuzzer's byte mutations
land on encoded events instead of on compressed bits. The result is a valid trace
(FORMAT.md allows any zstd frame).

fuzz_seeds.py --corpus MAKE_TRACE DIR - makes the seed corpus (tests/fuzz_corpus/)
from a build's tests/make_trace: a short ping-pong (raw frames; and again with the
recorder's timestamp column), a many-chunk trace
(as written, and with raw frames) and that trace cut at byte 700. Rerun it whenever
the encoding changes. make_trace records its own path in module_map events, so it
is run from a fixed, neutral place (/opt/rbtrace/bin, removed afterwards; needs
root) instead of the build's output tree."""
import os
import shutil
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


def raw_frames(src, dst):
    data = open(src, "rb").read()
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
    open(dst, "wb").write(out)


NEUTRAL_DIR = "/opt/rbtrace/bin"


def corpus(make_trace, outdir):
    made_dir = not os.path.isdir(NEUTRAL_DIR)
    os.makedirs(NEUTRAL_DIR, exist_ok=True)
    exe = os.path.join(NEUTRAL_DIR, "make_trace")
    shutil.copy(make_trace, exe)
    os.chmod(exe, 0o755)
    tmp = os.path.join(outdir, ".seed.tmp")
    try:
        subprocess.run([exe, tmp, "--iters", "1"], check=True)
        raw_frames(tmp, os.path.join(outdir, "pingpong_raw.bin"))
        subprocess.run([exe, tmp, "--iters", "1", "--ts-column", "1"], check=True)
        raw_frames(tmp, os.path.join(outdir, "pingpong_tscol_raw.bin"))
        zst = os.path.join(outdir, "chunks_zstd.bin")
        subprocess.run([exe, zst, "--iters", "10", "--chunk-bytes", "256"], check=True)
        raw_frames(zst, os.path.join(outdir, "chunks_raw.bin"))
        with open(zst, "rb") as f, open(os.path.join(outdir, "truncated.bin"), "wb") as t:
            t.write(f.read(700))
    finally:
        os.unlink(exe)
        if made_dir:
            os.removedirs(NEUTRAL_DIR)
        if os.path.exists(tmp):
            os.unlink(tmp)


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--corpus":
        corpus(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3:
        raw_frames(sys.argv[1], sys.argv[2])
    else:
        sys.exit("usage: fuzz_seeds.py IN.rbt OUT | fuzz_seeds.py --corpus MAKE_TRACE DIR")


main()
