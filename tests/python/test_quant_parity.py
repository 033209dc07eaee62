# Parity of leantune's NF4 / FP4 quantization with bitsandbytes (the oracle, its CPU build):
# `leantune quant-dump` quantizes f32 tensors, and every byte of its codes, absmax values and,
# with double quantization, 8-bit absmax codes, second-level scales and offset must equal
# bitsandbytes.functional.quantize_4bit's; the dequantized tensors (reference and the tiled fast
# path) must equal dequantize_4bit's bit for bit. Shapes cover odd element counts, short last
# blocks and block sizes 64..4096.
import subprocess

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file, save_file

try:
    import bitsandbytes.functional as bnbf
except Exception as e:  # noqa: BLE001 - any import failure means no oracle
    pytest.skip(f"bitsandbytes cannot be imported ({e!r}); install it with scripts/install-test-deps.sh",
                allow_module_level=True)

CASES = [  # (shape, blocksize)
    ((64, 128), 64),
    ((96, 200), 64),      # 19200 elements: blocks span rows
    ((7, 37), 64),        # 259: odd count, short last block, padding nibble
    ((1, 1), 64),
    ((3, 333), 128),
    ((40, 300), 256),
    ((1000,), 512),       # short last block of 488
    ((33, 129), 1024),
    ((5, 1000), 2048),
    ((70, 300), 4096),
    ((300, 600), 64),     # 2813 blocks: 11 second-level blocks, last one short
    ((2048, 1056), 64),   # 33792 blocks: torch splits the offset's mean across its threads
]


def weights(shape, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * 0.05
    x.view(-1)[::97] *= 40.0  # a few large values: uneven absmax across blocks
    if x.numel() > 300:
        x.view(-1)[128:192] = 0.0  # an all-zero block (absmax 0)
    return x.contiguous()


def flat_block_dequant(packed, state, blocksize, qtype, shape):
    # bitsandbytes' reference dequantization (backends/default/ops.py): code[q] * absmax[i // blocksize].
    absmax = state.absmax
    if state.nested:
        absmax = bnbf.dequantize_blockwise(state.absmax, state.state2) + state.offset
    q = packed.numpy().reshape(-1)
    idx = np.stack([q >> 4, q & 15], axis=1).reshape(-1)[: int(np.prod(shape))]
    code = bnbf.get_4bit_type(qtype, device="cpu").numpy()
    blocks = np.arange(idx.size) // blocksize
    return (code[idx] * absmax.numpy()[blocks]).astype(np.float32).reshape(shape)


def run_dump(leantune_bin, tmp_path, x, qtype, blocksize, dq):
    src, out = tmp_path / "x.safetensors", tmp_path / "q.safetensors"
    save_file({"w": x.numpy()}, str(src))
    cmd = [leantune_bin, "quant-dump", "--in", str(src), "--type", qtype, "--blocksize", str(blocksize),
           "--mean-threads", str(torch.get_num_threads()), "--out", str(out)]
    if dq:
        cmd.append("--double-quant")
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return load_file(str(out))


def bits(a):
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def bits_zero_unsigned(a):
    # FP4 code 8 means -0.0: bitsandbytes' C++ dequantization (fp4_lut) returns -0.0, its Python
    # fallback (odd last dimension, or block size >= 2048 on AVX-512) and get_4bit_type +0.0.
    # Adding +0.0 turns -0.0 into +0.0 and leaves every other value's bits alone.
    return bits(np.asarray(a, dtype=np.float32) + np.float32(0.0))


@pytest.mark.parametrize("qtype", ["nf4", "fp4"])
@pytest.mark.parametrize("dq", [False, True], ids=["plain", "double_quant"])
@pytest.mark.parametrize("shape,blocksize", CASES)
def test_quantize_4bit_matches_bitsandbytes(leantune_bin, tmp_path, qtype, dq, shape, blocksize):
    x = weights(shape, seed=hash((shape, blocksize)) % 1000)
    got = run_dump(leantune_bin, tmp_path, x, qtype, blocksize, dq)
    packed, state = bnbf.quantize_4bit(x, blocksize=blocksize, compress_statistics=dq, quant_type=qtype)

    np.testing.assert_array_equal(bits_zero_unsigned(got["code"]), bits_zero_unsigned(state.code.numpy()))
    np.testing.assert_array_equal(got["codes"], packed.numpy().reshape(-1))
    if dq:
        np.testing.assert_array_equal(got["qabsmax"], state.absmax.numpy())
        np.testing.assert_array_equal(bits(got["absmax2"]), bits(state.state2.absmax.numpy()))
        np.testing.assert_array_equal(bits(got["offset"]), bits(np.array([state.offset.item()])))
        np.testing.assert_array_equal(bits(got["code2"]), bits(state.state2.code.numpy()))
    else:
        np.testing.assert_array_equal(bits(got["absmax"]), bits(state.absmax.numpy()))

    want = bnbf.dequantize_4bit(packed, state).numpy().reshape(x.shape)
    flat = flat_block_dequant(packed, state, blocksize, qtype, x.shape)
    if not np.array_equal(bits_zero_unsigned(want), bits_zero_unsigned(flat)):
        # bitsandbytes 0.50.2's AVX-512 CPU dequantization kernel (last dimension a multiple of 32)
        # indexes absmax per row, row * (cols // blocksize) + col // blocksize, which contradicts the
        # flat blocks quantize_4bit (and its own reference path) uses when cols % blocksize != 0.
        # Only in that case is the reference formula the oracle.
        assert x.shape[-1] % blocksize != 0, "dequantize_4bit disagrees with quantize_4bit's block layout"
        want = flat
    np.testing.assert_array_equal(bits_zero_unsigned(got["dequant"]), bits_zero_unsigned(want))
    np.testing.assert_array_equal(bits(got["dequant_tiles"]), bits(got["dequant"]))


def test_high_nibble_is_first_element(leantune_bin, tmp_path):
    # Element 0 -> +1.0 (NF4 code 15), element 1 -> -1.0 (code 0): byte 0xF0.
    x = torch.zeros(1, 64)
    x[0, 0], x[0, 1] = 1.0, -1.0
    got = run_dump(leantune_bin, tmp_path, x, "nf4", 64, False)
    assert got["codes"][0] == 0xF0
    packed, _ = bnbf.quantize_4bit(x, blocksize=64, quant_type="nf4")
    assert packed.numpy().reshape(-1)[0] == 0xF0


def test_dynamic_map_matches_create_dynamic_map(leantune_bin, tmp_path):
    got = run_dump(leantune_bin, tmp_path, weights((8, 64), 1), "nf4", 64, True)
    np.testing.assert_array_equal(bits(got["code2"]), bits(bnbf.create_dynamic_map(signed=True).numpy()))


def test_bad_blocksize_is_a_clear_error(leantune_bin, tmp_path):
    src = tmp_path / "x.safetensors"
    save_file({"w": np.ones((4, 64), np.float32)}, str(src))
    for bs in ("96", "32", "8192"):
        r = subprocess.run([leantune_bin, "quant-dump", "--in", str(src), "--type", "nf4", "--blocksize", bs,
                            "--out", str(tmp_path / "q.safetensors")], capture_output=True, text=True)
        assert r.returncode == 1
        assert f"block size {bs} is not supported" in r.stderr


def test_quantizing_quantized_tensor_is_refused(leantune_bin, tmp_path):
    src = tmp_path / "x.safetensors"
    save_file({"w": np.zeros((4, 32), np.uint8)}, str(src))
    r = subprocess.run([leantune_bin, "quant-dump", "--in", str(src), "--type", "nf4",
                        "--out", str(tmp_path / "q.safetensors")], capture_output=True, text=True)
    assert r.returncode == 1 and "already quantized" in r.stderr
