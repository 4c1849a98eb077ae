"""weft.torch.SequenceParallelAttention on the CPU: at world 2 over gloo (attention_world_of_two.py:
the forward through a stand-in torch.ops.weft.ag_attention written by its definition, the backward
weft's own, both against plain torch and the definition); the op's fake kernel under torch.compile's
tracing (shape and refusals). The GPU kernel through the same op: test_attention_torch.py."""

import re

import pytest

import gloo_world  # this folder's (python/tests)

torch = pytest.importorskip("torch")

try:
    import weft.torch as wt  # noqa: F401 - registers torch.ops.weft
except (ImportError, OSError) as e:  # no CUDA torch here
    pytest.skip(f"weft.torch is not importable: {e}", allow_module_level=True)


def test_the_attention_layer_at_world_two_over_gloo_matches_plain_torch_and_the_definition():
    stdout = gloo_world.run_script("attention_world_of_two.py")
    assert len(re.findall(r"rank \d shape", stdout)) == 2 * 2 * 2 * 2, stdout


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
