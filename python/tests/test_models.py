"""weft.models: the model shapes of the blocks and step benchmark (no torch, no GPU)."""

import pytest

from weft import models


def test_every_config_is_a_consistent_decoder():
    assert set(models.CONFIGS) == {"llama3-8b", "llama3-70b", "qwen2-72b", "mixtral-8x7b"}
    for cfg in models.CONFIGS.values():
        assert cfg.heads * cfg.head_dim == cfg.hidden, cfg.name  # these models' attention width is the hidden size
        assert cfg.heads % cfg.kv_heads == 0, cfg.name
        assert cfg.is_moe == (cfg.name == "mixtral-8x7b")
    mixtral = models.config("mixtral-8x7b")
    assert (mixtral.experts, mixtral.topk) == (8, 2)


def test_per_rank_splits_heads_groups_and_ffn():
    cfg = models.config("llama3-70b")
    for world in (1, 2, 4, 8):
        local = cfg.per_rank(world)
        assert local.heads * world == cfg.heads and local.kv_heads * world == cfg.kv_heads and local.ffn * world == cfg.ffn
        assert local.heads % local.kv_heads == 0, "each rank holds whole GQA groups"
        assert local.hidden == cfg.hidden and local.head_dim == cfg.head_dim
    qwen = models.config("qwen2-72b")
    assert qwen.per_rank(8).ffn == 29568 // 8


def test_worlds_that_do_not_divide_are_refused_with_the_reason():
    with pytest.raises(ValueError, match=r"kv_heads=8 does not split over 16 ranks"):
        models.config("llama3-8b").per_rank(16)
    with pytest.raises(ValueError, match=r"heads=32 does not split over 3 ranks"):
        models.config("llama3-8b").per_rank(3)
    with pytest.raises(ValueError, match="unknown model 'llama2'; known: llama3-70b, llama3-8b, mixtral-8x7b, qwen2-72b"):
        models.config("llama2")


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="not a multiple of kv_heads"):
        models.ModelConfig("x", hidden=64, ffn=128, heads=6, kv_heads=4, head_dim=16)
    with pytest.raises(ValueError, match="give both"):
        models.ModelConfig("x", hidden=64, ffn=128, heads=4, kv_heads=4, head_dim=16, experts=8)
    with pytest.raises(ValueError, match="must be positive"):
        models.ModelConfig("x", hidden=0, ffn=128, heads=4, kv_heads=4, head_dim=16)


def test_scaled_keeps_the_structure():
    small = models.scaled(models.config("llama3-8b"), 8)
    assert (small.hidden, small.ffn, small.heads, small.kv_heads, small.head_dim) == (512, 1792, 4, 1, 128)
    assert small.heads * small.head_dim == small.hidden
    with pytest.raises(ValueError, match="cannot scale"):
        models.scaled(models.config("llama3-8b"), 3)
