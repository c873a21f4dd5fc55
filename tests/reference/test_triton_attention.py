"""The Triton paged-decode kernel and the decode-graph buffers, checked on CPU.

The kernel runs in Triton's interpreter (TRITON_INTERPRET=1, set before triton_attention is
imported); the graph buffers run uncaptured (capture=False), which is the same code path up to
the replay itself. Both must give what the torch path gives.
"""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

os.environ["TRITON_INTERPRET"] = "1"  # before the kernel module is imported (triton.jit reads it then)
pytest.importorskip("triton")

from chaos.reference.engine.cuda_graphs import batch_buckets  # noqa: E402
from chaos.reference.engine.sequence import SamplingParams  # noqa: E402
from chaos.reference.triton_attention import DecodeCase  # noqa: E402

from .conftest import make_engine  # noqa: E402
from .test_engine import GREEDY, prompts  # noqa: E402

pytestmark = pytest.mark.beside  # its slow tests judge state, not time: beside the whole runs under xdist


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float16, 2e-3)])
@pytest.mark.parametrize("heads,kv_heads,head_dim,block_size", [(4, 2, 16, 16), (8, 8, 24, 5), (16, 2, 32, 16)])
def test_kernel_matches_torch_decode(dtype, tol, heads, kv_heads, head_dim, block_size):
    # Contexts at tile (64) and block edges, several tiles long; blocks scattered over the cache.
    lens = [1, block_size, block_size + 1, 63, 130, 200]
    case = DecodeCase(lens, heads, kv_heads, head_dim, block_size, dtype=dtype, seed=1)
    got, want = case.kernel(), case.gather(torch.float32)
    assert got.dtype == dtype
    assert torch.allclose(got.float(), want, atol=tol, rtol=tol), (got.float() - want).abs().max()


def test_kernel_gives_zeros_for_an_empty_context():
    case = DecodeCase([16, 3], heads=4, kv_heads=2, head_dim=16, block_size=16)
    case.lens[0] = 0
    out = case.kernel()
    assert torch.equal(out[0], torch.zeros(4, 16))
    assert out[1].abs().sum() > 0


@pytest.mark.slow
def test_engine_with_the_triton_kernel_gives_the_same_greedy_tokens():
    ps = prompts(6, seed=2)
    want = [o.token_ids for o in make_engine(decode_kernel="torch").generate(ps, GREEDY)]
    engine = make_engine(decode_kernel="triton")
    assert engine.model_runner.decode_kernel == "triton"
    assert [o.token_ids for o in engine.generate(ps, GREEDY)] == want


def test_batch_buckets():
    assert batch_buckets(1) == [1]
    assert batch_buckets(6) == [1, 2, 4, 6]
    assert batch_buckets(64) == [1, 2, 4, 8, 16, 32, 48, 64]
    assert batch_buckets(40) == [1, 2, 4, 8, 16, 32, 40]


@pytest.mark.slow
@pytest.mark.parametrize("kernel", ["torch", "triton"])
def test_padded_graph_buffers_give_the_same_tokens(kernel):
    # 7 and then fewer streams: batches padded up to buckets 8, 4, 2; finished and new requests
    # come and go between steps, and a sampled stream rides along.
    ps = prompts(7, seed=4, lo=5, hi=40)
    params = [SamplingParams(temperature=0.0, max_tokens=8 + 3 * i, ignore_eos=True) for i in range(7)]
    want = [o.token_ids for o in make_engine(decode_kernel=kernel).generate(ps, params)]

    engine = make_engine(decode_kernel=kernel, max_num_seqs=8, num_kv_blocks=64)
    runner = engine.model_runner
    runner.graphs = runner.decode_graphs(capture=False)
    scratch = runner.kv_caches[0][0].view(-1, 16, *runner.kv_caches[0].shape[2:])[runner.scratch_block].clone()
    sampled = SamplingParams(temperature=1.0, max_tokens=12, ignore_eos=True)
    got = [o.token_ids for o in engine.generate(ps + prompts(1, seed=9), params + [sampled])]
    assert got[:7] == want and len(got[7]) == 12
    assert runner.graphs.num_steps >= 8  # most steps were decode-only and went through the buffers
    # Padding wrote only into the scratch block, which no sequence owns.
    assert runner.scratch_block not in range(engine.block_manager.capacity)
    after = runner.kv_caches[0][0].view(-1, 16, *runner.kv_caches[0].shape[2:])[runner.scratch_block]
    assert not torch.equal(after, scratch)


def test_a_kernel_that_fails_its_start_up_check_is_refused_or_replaced(monkeypatch):
    import chaos.reference.triton_attention as ta

    monkeypatch.setattr(ta, "self_check", lambda device, dtype: 1.0)
    with pytest.raises(RuntimeError, match="start-up check"):
        make_engine(decode_kernel="triton")  # asked for by name: refuse to start
    runner = make_engine(decode_kernel="torch").model_runner
    runner.decode_kernel = "triton"
    runner._check_decode_kernel(fall_back=True)  # "auto" on a GPU: warn and use the torch kernel
    assert runner.decode_kernel == "torch"


HOPPER = textwrap.dedent("""
    import re, sys
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from chaos.reference.triton_attention import _paged_decode_kernel as k

    dtype, ieee, head_dim = sys.argv[1], sys.argv[2] == "ieee", int(sys.argv[3])
    sig = {n: "i32" for n in k.arg_names}
    sig.update({n: "*" + dtype for n in ("q_ptr", "k_ptr", "v_ptr", "out_ptr")})
    sig.update(tables_ptr="*i64", lens_ptr="*i64", scale="fp32")
    consts = dict(GROUP=2, HEAD_DIM=head_dim, BLOCK_SIZE=16, BLOCK_H=16, BLOCK_D=head_dim, BLOCK_N=64,
                  IEEE=ieee, INTERPRET=False)
    sig.update({c: "constexpr" for c in consts})
    aligned = [n for n in k.arg_names if sig[n] != "constexpr" and n not in k.do_not_specialize and n != "scale"]
    attrs = {(k.arg_names.index(a),): [["tt.divisibility", 16]] for a in aligned}
    ptx = triton.compile(ASTSource(k, sig, consts, attrs), target=GPUTarget("cuda", 90, 32)).asm["ptx"]
    print("mma", len(re.findall(r"mma\\.sync", ptx)), "cp.async", len(re.findall(r"cp\\.async", ptx)))
""")


@pytest.mark.slow
@pytest.mark.parametrize("dtype,precision", [("bf16", "tf32"), ("fp32", "ieee")])
def test_kernel_compiles_for_hopper(dtype, precision):
    # The compiled (not interpreted) kernel, built for an H100/H200 (sm_90) by Triton's own compiler and
    # ptxas; no GPU is needed to compile. bfloat16 must use tensor cores and asynchronous (pipelined) loads.
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-c", HOPPER, dtype, precision, "128"], env=env, capture_output=True,
                       text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    mma, cp_async = (int(x) for x in r.stdout.split()[1::2])
    if dtype == "bf16":
        assert mma > 0 and cp_async > 0, r.stdout
