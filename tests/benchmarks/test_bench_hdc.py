"""Emotional/semantic retrieval factors over n = 100,000 entries, one group so the table compares them.

- HDC: numba Hamming similarity over 10,240-bit fingerprints (128 MB), its fused top-k twin, and the
  idiomatic numpy peer (xor + bitwise_count with out= buffers), plus a plain stream-read probe of the
  same array: the Hamming kernel can at best match memory bandwidth.
- PAD cosine emotional factor in numpy over three float32 arrays of precomputed unit vectors (SoA).
- 384-d float32 embedding cosine in numpy: rows normalised at insert, so one matrix-vector product.

Run: pytest tests/benchmarks/test_bench_hdc.py -p no:cacheprovider --benchmark-only
"""

import time

import numpy as np
import pytest
from numba import njit

from golem import hdc

N = 100_000
EMB_DIM = 384
GROUP = "retrieval-factor-100k"


@pytest.fixture(scope="module")
def fps():
    """Realistic fingerprints (encoded states), not uniform noise: the kernel must not care, but be honest."""
    rng = np.random.default_rng(0)
    im = hdc.ItemMemory(0)
    emotions = ["fear", "joy", "anger", "sadness", "trust", "surprise", "disgust", "anticipation", "neutral"]
    return hdc.encode_batch(
        rng.uniform(-1, 1, N),
        rng.uniform(-1, 1, N),
        rng.uniform(-1, 1, N),
        list(rng.choice(emotions, N)),
        rng.uniform(0, 1, N),
        list(rng.choice(["calm", "bull", "crash"], N)),
        im,
        extra={"protocol": list(rng.choice(["aave", "uniswap", "curve", "lido"], N))},
    )


@pytest.fixture(scope="module")
def q():
    return hdc.high_arousal_prototype(hdc.ItemMemory(0))


@njit(cache=True)
def _stream_probe(a):
    """Plain read of every word (xor-reduce): the memory-bandwidth ceiling for a one-pass kernel."""
    flat = a.ravel()
    acc = np.uint64(0)
    for i in range(flat.size):
        acc ^= flat[i]
    return acc


def _alternate(f, g, rounds=15):
    """Median times of f and g measured alternately (the host's bandwidth flips between modes)."""
    tf, tg = [], []
    for _ in range(rounds):
        t = time.perf_counter()
        f()
        tf.append(time.perf_counter() - t)
        t = time.perf_counter()
        g()
        tg.append(time.perf_counter() - t)
    return float(np.median(tf)), float(np.median(tg))


@pytest.mark.benchmark(group=GROUP)
def test_hdc_hamming_numba(benchmark, fps, q):
    hdc.hamming_similarity_batch(q, fps)
    _stream_probe(fps)
    t_kernel, t_stream = _alternate(lambda: hdc.hamming_similarity_batch(q, fps), lambda: _stream_probe(fps))
    benchmark.extra_info["GB_per_s"] = round(fps.nbytes / t_kernel / 1e9, 1)
    benchmark.extra_info["kernel_over_stream_read"] = round(t_kernel / t_stream, 2)
    out = benchmark(hdc.hamming_similarity_batch, q, fps)
    assert out.shape == (N,)


@pytest.mark.benchmark(group=GROUP)
def test_hdc_hamming_topk8_numba(benchmark, fps, q):
    hdc.hamming_topk(q, fps, 8)
    ids, _ = benchmark(hdc.hamming_topk, q, fps, 8)
    assert ids.shape == (8,)


@pytest.mark.benchmark(group=GROUP)
def test_hdc_stream_read_probe(benchmark, fps):
    _stream_probe(fps)
    benchmark(_stream_probe, fps)


@pytest.mark.benchmark(group=GROUP)
def test_hdc_hamming_numpy_peer(benchmark, fps, q):
    """Idiomatic numpy: xor, per-word popcount (np.bitwise_count, numpy >= 2), row sums; buffers reused."""
    if not hasattr(np, "bitwise_count"):
        pytest.skip("np.bitwise_count needs numpy >= 2.0")
    xbuf = np.empty_like(fps)
    cbuf = np.empty(fps.shape, dtype=np.uint8)
    counts = np.empty(N, dtype=np.int64)
    out = np.empty(N, dtype=np.float64)

    def run():
        np.bitwise_xor(fps, q, out=xbuf)
        np.bitwise_count(xbuf, out=cbuf)
        np.sum(cbuf, axis=1, dtype=np.int64, out=counts)
        np.divide(counts, float(hdc.D_BITS), out=out)
        return np.subtract(1.0, out, out=out)

    got = benchmark(run)
    assert np.array_equal(got, hdc.hamming_similarity_batch(q, fps))


@pytest.mark.benchmark(group=GROUP)
def test_pad_cosine_numpy(benchmark):
    """emotional = (unit_tag · unit_pad + 1) / 2 over SoA float32 arrays of precomputed unit vectors."""
    rng = np.random.default_rng(1)
    pad = rng.uniform(-1, 1, (3, N)).astype(np.float32)
    norm = np.maximum(np.sqrt((pad * pad).sum(axis=0)), np.float32(1e-8))
    up, ua, ud = (np.ascontiguousarray(x) for x in pad / norm)
    cur = np.array([-0.4, 0.7, -0.3], dtype=np.float32)
    cp, ca, cd = (cur / np.float32(np.linalg.norm(cur))) * np.float32(0.5)  # fold the /2 in
    out = np.empty(N, dtype=np.float32)
    tmp = np.empty(N, dtype=np.float32)

    def run():
        np.multiply(up, cp, out=out)
        np.multiply(ua, ca, out=tmp)
        np.add(out, tmp, out=out)
        np.multiply(ud, cd, out=tmp)
        np.add(out, tmp, out=out)
        return np.add(out, np.float32(0.5), out=out)

    got = benchmark(run)
    ref = ((up * cur[0] + ua * cur[1] + ud * cur[2]) / np.linalg.norm(cur) + 1) / 2
    np.testing.assert_allclose(got, ref, atol=1e-5)


@pytest.mark.benchmark(group=GROUP)
def test_embedding_cosine_384_numpy(benchmark):
    """Semantic factor: unit rows (normalised at insert) @ unit query = cosine, one BLAS sgemv."""
    rng = np.random.default_rng(2)
    emb = rng.standard_normal((N, EMB_DIM), dtype=np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    qv = rng.standard_normal(EMB_DIM, dtype=np.float32)
    qv /= np.linalg.norm(qv)
    out = np.empty(N, dtype=np.float32)
    benchmark(np.dot, emb, qv, out=out)
    assert abs(float(out[0]) - float(emb[0] @ qv)) < 1e-5
