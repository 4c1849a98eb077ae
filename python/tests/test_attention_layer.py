"""weft.torch.SequenceParallelAttention on the CPU: at world 2 over gloo (attention_world_of_two.py:
the forward through a stand-in torch.ops.weft.ag_attention written by its definition, the backward
weft's own, both against plain torch and the definition); the op's fake kernel under torch.compile's
tracing (shape and refusals). The GPU kernel through the same op: test_attention_torch.py."""

import os
import re
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

try:
    import weft.torch as wt
    from weft.torch import ops
except (ImportError, OSError) as e:  # no CUDA torch here
    pytest.skip(f"weft.torch is not importable: {e}", allow_module_level=True)


def test_the_attention_layer_at_world_two_over_gloo_matches_plain_torch_and_the_definition():
    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "attention_world_of_two.py")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    done = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=600, env=env)
    print(done.stdout)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    checked = re.findall(r"rank \d shape", done.stdout)
    assert len(checked) == 2 * 2 * 2 * 2 and "FAILED" not in done.stdout, done.stdout


def test_the_fake_kernel_gives_q_s_shape_and_refuses_what_the_kernel_refuses():
    with torch._subclasses.fake_tensor.FakeTensorMode():
        q = torch.empty(128, 2, 8, 64, dtype=torch.bfloat16)
        k = torch.empty(128, 2, 2, 64, dtype=torch.bfloat16)
        o = torch.ops.weft.ag_attention(q, k, k, True, 0)
        assert o.shape == q.shape and o.dtype == torch.bfloat16
        with pytest.raises(ValueError, match="q is torch.float32"):
            torch.ops.weft.ag_attention(q.float(), k, k, True, 0)
        with pytest.raises(ValueError, match="k and v must be q's shape with kv_heads"):
            torch.ops.weft.ag_attention(q, k[:, :1], k, True, 0)
        with pytest.raises(ValueError, match=r"must be \[tokens, heads, head_dim\]"):
            torch.ops.weft.ag_attention(q[0, 0], k[0, 0], k[0, 0], True, 0)
