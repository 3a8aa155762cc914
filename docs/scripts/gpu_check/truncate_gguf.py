"""Copy a llama-architecture GGUF keeping only its first N blocks; `--small` also requantizes a
Q8_0 token embedding to Q4_0 (half its bytes). Made for the GPU check (README.md beside this):
the demo pair does not fit in the 64 MiB a device call carries, a cut model does.

    .venv/bin/python docs/scripts/gpu_check/truncate_gguf.py SRC DST N [--small]

Its text is degenerate (a model cut after 18 of 30 blocks repeats itself): it shows offload,
greedy identity and costs, not what speculation gains on real text."""

from __future__ import annotations

import sys

from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter, quants


def main() -> None:
    src, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    small = "--small" in sys.argv[4:]
    r = GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = GGUFWriter(dst, arch)
    for name, field in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        value = n if name == f"{arch}.block_count" else field.contents()
        if field.types[0] == GGUFValueType.ARRAY:
            w.add_key_value(name, value, field.types[0], sub_type=field.types[-1])
        else:
            w.add_key_value(name, value, field.types[0])
    for t in r.tensors:
        if t.name.startswith("blk.") and int(t.name.split(".")[1]) >= n:
            continue
        if small and t.name == "token_embd.weight" and t.tensor_type == GGMLQuantizationType.Q8_0:
            q = quants.quantize(quants.dequantize(t.data, GGMLQuantizationType.Q8_0), GGMLQuantizationType.Q4_0)
            w.add_tensor(t.name, q, raw_shape=q.shape, raw_dtype=GGMLQuantizationType.Q4_0)
            continue
        w.add_tensor(t.name, t.data, raw_shape=t.data.shape, raw_dtype=t.tensor_type)
    finish(w)


def finish(w: GGUFWriter) -> None:
    """Write what `w` holds (header, metadata, tensors) and close it."""
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
