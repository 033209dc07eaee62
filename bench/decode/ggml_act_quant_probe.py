# A diagnostic, not a benchmark or a test: does llama.cpp's CPU activation quantizer (ggml-cpu's
# from_float for q8_0, which quantizes each matmul input before a q8_0 / q4_0 weight's dot products)
# give the codes leantune's kernels/q8_0_act.h computes (d = amax/127 stored as f16, codes
# x · (127/amax) rounded half to even), or those of ggml's reference quantize_row_q8_0_ref (codes
# x · (1/d) with d in f32, roundf: half away from zero)? Run with llama-cpp-python installed:
#   .venv/bin/python bench/decode/ggml_act_quant_probe.py
# It calls libggml-cpu.so from llama-cpp-python's wheel through ctypes on 200,000 random blocks, a
# quarter of them built of exact half steps (ties), and prints the mismatches against both formulas
# (numpy restatements of them), and the vec_dot_type of q8_0 / q4_0 weights (8: q8_0 inputs).
import ctypes
import glob

import numpy as np

lib = glob.glob(str(__import__("llama_cpp").__path__[0]) + "/lib/")[0]
ctypes.CDLL(lib + "libggml-base.so", mode=ctypes.RTLD_GLOBAL)
cpu = ctypes.CDLL(lib + "libggml-cpu.so", mode=ctypes.RTLD_GLOBAL)
cpu.ggml_cpu_init()
FROM = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)


class Traits(ctypes.Structure):  # ggml-cpu.h struct ggml_type_traits_cpu
    _fields_ = [("from_float", FROM), ("vec_dot", ctypes.c_void_p), ("vec_dot_type", ctypes.c_int),
                ("nrows", ctypes.c_int64)]


cpu.ggml_get_type_traits_cpu.restype = ctypes.POINTER(Traits)
for name, t in (("q8_0", 8), ("q4_0", 2)):
    print(f"{name} weights: vec_dot_type {cpu.ggml_get_type_traits_cpu(t).contents.vec_dot_type}")
rng = np.random.default_rng(0)
n_blocks = 200000
x = rng.standard_normal(n_blocks * 32).astype(np.float32)
ties = x.reshape(-1, 32)[: n_blocks // 4]  # amax 127/8, the rest on half steps of 1/8
ties[:, 0] = 127.0 / 8
ties[:, 1:] = (rng.integers(-254, 255, size=(ties.shape[0], 31)) / 2.0 / 8).astype(np.float32)
out = np.zeros(n_blocks * 34, dtype=np.uint8)
cpu.ggml_get_type_traits_cpu(8).contents.from_float(x.ctypes.data, out.ctypes.data, x.size)
blocks = out.reshape(-1, 34)
d_ggml, q_ggml = blocks[:, :2].copy().view(np.float16).ravel(), blocks[:, 2:].view(np.int8)
xb = x.reshape(-1, 32)
amax = np.abs(xb).max(1)
d = (amax / np.float32(127)).astype(np.float32)
ours = np.rint(xb * (np.float32(127) / amax)[:, None]).astype(np.int8)
v = xb * np.where(d != 0, np.float32(1) / d, 0).astype(np.float32)[:, None]
ref = (np.sign(v) * np.floor(np.abs(v) + np.float32(0.5))).astype(np.int8)
print(f"scales equal to f16(amax/127): {np.array_equal(d_ggml, d.astype(np.float16))}")
print(f"codes unlike leantune's (127/amax, half to even): {int((q_ggml != ours).sum())} of {q_ggml.size}")
print(f"codes unlike ggml's reference (1/d, roundf): {int((q_ggml != ref).sum())} of {q_ggml.size}")
