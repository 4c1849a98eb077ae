"""Model shapes for weft's blocks and step benchmark: the dimensions of well-known decoder models
(nothing is downloaded; weights are random), and how each layer's matrices split over W ranks of
tensor + sequence parallelism (Megatron's layout). Needs no torch.

    cfg = weft.models.config("llama3-8b")
    cfg.per_rank(world=8)      # heads, kv heads, ffn per rank; raises ValueError where W does not divide
"""

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class ModelConfig:
    """One decoder layer's dimensions. Dense when experts == 0; a mixture of experts (every layer's
    MLP replaced by `experts` expert MLPs of `ffn` each, `topk` per token) otherwise."""

    name: str
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int
    experts: int = 0
    topk: int = 0
    norm_eps: float = 1e-5
    rope_theta: float = 500000.0

    def __post_init__(self):
        for field in ("hidden", "ffn", "heads", "kv_heads", "head_dim"):
            if getattr(self, field) <= 0:
                raise ValueError(f"ModelConfig {self.name}: {field}={getattr(self, field)} must be positive")
        if self.heads % self.kv_heads:
            raise ValueError(f"ModelConfig {self.name}: heads={self.heads} is not a multiple of kv_heads={self.kv_heads} (GQA groups)")
        if (self.experts == 0) != (self.topk == 0) or not 0 <= self.topk <= self.experts:
            raise ValueError(f"ModelConfig {self.name}: experts={self.experts}, topk={self.topk}: give both (1 <= topk <= experts) or neither")

    @property
    def is_moe(self):
        return self.experts > 0

    @property
    def q_width(self):
        return self.heads * self.head_dim

    @property
    def kv_width(self):
        return self.kv_heads * self.head_dim

    def per_rank(self, world):
        """Each rank's share under tensor parallelism over `world` ranks: query heads, kv heads (each
        rank holds whole GQA groups, so kv heads split too), the MLP's (or each expert's) ffn."""
        if world < 1:
            raise ValueError(f"{self.name}: world={world} must be at least 1")
        for what, value in (("heads", self.heads), ("kv_heads", self.kv_heads), ("ffn", self.ffn)):
            if value % world:
                raise ValueError(f"{self.name}: {what}={value} does not split over {world} ranks; "
                                 f"tensor parallelism needs world to divide it (e.g. world in {divisors(self.kv_heads)})")
        return replace(self, name=f"{self.name}/tp{world}", ffn=self.ffn // world, heads=self.heads // world, kv_heads=self.kv_heads // world)


def divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


# Published dimensions (hidden, ffn, heads, kv heads, head dim; experts and top-k for Mixtral).
CONFIGS = {
    c.name: c
    for c in (
        ModelConfig("llama3-8b", hidden=4096, ffn=14336, heads=32, kv_heads=8, head_dim=128),
        ModelConfig("llama3-70b", hidden=8192, ffn=28672, heads=64, kv_heads=8, head_dim=128),
        ModelConfig("qwen2-72b", hidden=8192, ffn=29568, heads=64, kv_heads=8, head_dim=128, norm_eps=1e-6, rope_theta=1000000.0),
        ModelConfig("mixtral-8x7b", hidden=4096, ffn=14336, heads=32, kv_heads=8, head_dim=128, experts=8, topk=2, rope_theta=1000000.0),
    )
}


def config(name):
    """The ModelConfig called `name` (one of CONFIGS), or a ValueError listing them."""
    try:
        return CONFIGS[name]
    except KeyError:
        raise ValueError(f"unknown model '{name}'; known: {', '.join(sorted(CONFIGS))}") from None


def scaled(cfg, factor):
    """The same model with every width divided by `factor` (heads and kv heads too), for tests that
    need the structure at a small size."""
    if factor < 1 or cfg.heads % factor or cfg.kv_heads % factor or cfg.ffn % factor or cfg.hidden % factor:
        raise ValueError(f"{cfg.name}: cannot scale by 1/{factor}")
    return replace(cfg, name=f"{cfg.name}/{factor}", hidden=cfg.hidden // factor, ffn=cfg.ffn // factor,
                   heads=cfg.heads // factor, kv_heads=cfg.kv_heads // factor)
