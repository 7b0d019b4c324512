"""ModelConfig: the shape of a decoder-only Transformer, loaded from a preset or a HF config.json.

Presets are Hugging Face config.json files (gpuperf/workloads/presets/*.json), so a preset and a
user's own file go through the same loader. Field names follow transformers where they exist
(hidden_size, num_key_value_heads, ...); short read-only aliases (hidden, layers, heads, kv_heads,
intermediate, vocab) keep the op builders readable.
"""

from __future__ import annotations

import difflib
import functools
import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal

from gpuperf.errors import InputError, shown

Mlp = Literal["swiglu", "gelu"]
NormKind = Literal["rmsnorm", "layernorm"]
Positions = Literal["rope", "learned"]

PRESET_DIR = Path(__file__).parent / "presets"


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelConfig:
    """A decoder-only Transformer. num_experts == 0 means a dense MLP."""

    name: str
    model_type: str = "llama"
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int | None = None  # None -> MHA (= num_attention_heads)
    head_dim: int | None = None  # None -> hidden_size // num_attention_heads
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    mlp: Mlp = "swiglu"
    norm: NormKind = "rmsnorm"
    positions: Positions = "rope"
    qkv_bias: bool = False  # bias on q, k, v only (Qwen2)
    linear_bias: bool = False  # bias on every linear layer (GPT-2, GPT-NeoX)
    num_experts: int = 0
    num_experts_per_tok: int = 0
    parallel_residual: bool = False  # GPT-NeoX / GPT-J: x + attn(ln1(x)) + mlp(ln2(x))
    # Dropout in training (0 in inference): on the attention probabilities, and on each block's
    # output before the residual add (GPT-2's attn_pdrop / resid_pdrop; 0 for modern LLMs).
    attention_dropout: float = 0.0
    hidden_dropout: float = 0.0
    rope_theta: float = 10000.0
    source: str = ""  # where it was loaded from (preset name or file path)

    def __post_init__(self) -> None:
        for f in ("hidden_size", "num_attention_heads", "intermediate_size"):
            _positive(self, f)
        _positive(self, "num_hidden_layers", top=MAX_LAYERS)
        _positive(self, "vocab_size")
        _positive(self, "max_position_embeddings")
        if self.num_key_value_heads is None:
            object.__setattr__(self, "num_key_value_heads", self.num_attention_heads)
        _positive(self, "num_key_value_heads")
        if self.head_dim is None:
            if self.hidden_size % self.num_attention_heads:
                raise InputError(
                    f"{self.name}: num_attention_heads ({self.num_attention_heads}) must divide "
                    f"hidden_size ({self.hidden_size}) unless head_dim is given"
                )
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_attention_heads)
        _positive(self, "head_dim")
        if self.num_attention_heads % self.num_key_value_heads:  # type: ignore[operator]
            raise InputError(
                f"{self.name}: num_key_value_heads ({self.num_key_value_heads}) must divide "
                f"num_attention_heads ({self.num_attention_heads})"
            )
        _positive(self, "num_experts", zero=True)  # a fraction of an expert is a typo
        _positive(self, "num_experts_per_tok", zero=True)
        if self.num_experts and not 1 <= self.num_experts_per_tok <= self.num_experts:
            raise InputError(
                f"{self.name}: num_experts_per_tok ({self.num_experts_per_tok}) must be between 1 "
                f"and num_experts ({self.num_experts})"
            )
        for attr in ("attention_dropout", "hidden_dropout"):
            value = getattr(self, attr)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1:
                raise InputError(f"{self.name}: {attr} must be a probability in [0, 1), "
                                 f"got {shown(value)}")  # fmt: skip
        theta = self.rope_theta
        if isinstance(theta, bool) or not isinstance(theta, int | float) or not 0 < theta < 1e300:
            raise InputError(
                f"{self.name}: rope_theta must be a positive number, got {shown(theta)}"
            )
        for attr, allowed in (
            ("mlp", ("swiglu", "gelu")),
            ("norm", ("rmsnorm", "layernorm")),
            ("positions", ("rope", "learned")),
        ):
            if getattr(self, attr) not in allowed:
                raise InputError(f"{self.name}: {attr} must be one of {allowed}")

    # Short aliases used by the op builders.
    @property
    def hidden(self) -> int:
        return self.hidden_size

    @property
    def layers(self) -> int:
        return self.num_hidden_layers

    @property
    def heads(self) -> int:
        return self.num_attention_heads

    @property
    def kv_heads(self) -> int:
        return self.num_key_value_heads  # type: ignore[return-value]

    @property
    def hd(self) -> int:
        return self.head_dim  # type: ignore[return-value]

    @property
    def intermediate(self) -> int:
        return self.intermediate_size

    @property
    def vocab(self) -> int:
        return self.vocab_size

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def family(self) -> str:
        return self.model_type

    def param_breakdown(self) -> dict[str, int]:
        return dict(_param_breakdown(self))

    def _breakdown(self) -> dict[str, int]:
        """Parameters by part: embed, pos_embed, attn, mlp (all experts), router, norms, lm_head."""
        h, d, L = self.hidden, self.hd, self.layers
        q, kv = self.heads * d, self.kv_heads * d
        attn = h * (q + 2 * kv) + q * h
        if self.qkv_bias or self.linear_bias:
            attn += q + 2 * kv
        if self.linear_bias:
            attn += h
        n_mat = 3 if self.mlp == "swiglu" else 2
        expert = n_mat * h * self.intermediate
        if self.linear_bias:
            expert += (2 * self.intermediate if self.mlp == "swiglu" else self.intermediate) + h
        experts = max(1, self.num_experts)
        norm_params = h * (2 if self.norm == "layernorm" else 1)
        return {
            "embed": self.vocab * h,
            "pos_embed": self.max_position_embeddings * h if self.positions == "learned" else 0,
            "attn": L * attn,
            "mlp": L * experts * expert,
            "router": L * h * self.num_experts,
            "norms": (2 * L + 1) * norm_params,
            "lm_head": 0 if self.tie_word_embeddings else self.vocab * h,
        }

    def param_count(self) -> int:
        """Total parameters, every expert included, embeddings included (as HF num_parameters())."""
        return sum(self.param_breakdown().values())

    def active_param_count(self) -> int:
        """Parameters that touch one token: top_k of num_experts experts (all of a dense MLP)."""
        if not self.is_moe:
            return self.param_count()
        b = self.param_breakdown()
        b["mlp"] = b["mlp"] // self.num_experts * self.num_experts_per_tok
        return sum(b.values())

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


MAX_SIZE = 2**31  # a width, count or length beyond this is a typo, and its sums overflow floats
MAX_LAYERS = 4096  # 30x the deepest published LLM; the per-op table lists every layer


def _positive(cfg: ModelConfig, attr: str, zero: bool = False, top: int = MAX_SIZE) -> None:
    """An integer (not a bool, not a float), positive (or zero where `zero`), at most `top`."""
    value = getattr(cfg, attr)
    low = 0 if zero else 1
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= top:
        what = "a non-negative" if zero else "a positive"
        raise InputError(f"{cfg.name}: {attr} must be {what} integer up to {top}, "
                         f"got {shown(value)}")  # fmt: skip


@functools.lru_cache(maxsize=256)
def _param_breakdown(cfg: ModelConfig) -> tuple[tuple[str, int], ...]:
    """ModelConfig.param_breakdown, computed once per config (the plan search asks it often)."""
    return tuple(cfg._breakdown().items())


@functools.lru_cache(maxsize=1)
def _preset_names() -> tuple[str, ...]:
    return tuple(sorted(p.stem for p in PRESET_DIR.glob("*.json")))


def preset_names() -> list[str]:
    """Names of the bundled presets, sorted."""
    return list(_preset_names())


@functools.lru_cache(maxsize=64)
def _preset(name: str) -> dict[str, Any]:
    """A bundled preset's config dict, read once (presets ship with the package)."""
    return _read_json(PRESET_DIR / f"{name}.json")


def load_model(spec: str) -> ModelConfig:
    """A preset name (case-insensitive) or the path of a Hugging Face config.json."""
    data, name, source = hf_config(spec)
    return from_hf_dict(data, name=name, source=source)


def hf_config(spec: str) -> tuple[dict[str, Any], str, str]:
    """(the Hugging Face config dict, a name, where it came from) of a preset or a file: what a
    real run builds the model from."""
    names = {n.lower(): n for n in preset_names()}
    key = spec.strip().lower()
    if key in names:
        return dict(_preset(names[key])), names[key], ""
    from gpuperf.fileio import exists, is_dir, printable

    path = Path(spec).expanduser()
    if is_dir(path) and exists(path / "config.json"):
        path = path / "config.json"
    if path.suffix == ".json" or exists(path):
        data = _read_json(path)
        name = data.get("_name_or_path") or (
            path.parent.name if path.name == "config.json" else path.stem
        )
        return data, printable(str(name).split("/")[-1]) or path.stem, str(path)
    close = difflib.get_close_matches(key, list(names), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise InputError(
        f"unknown model {shown(spec)}{hint} (presets: {', '.join(preset_names())}; "
        "or give the path of a Hugging Face config.json)"
    )


def _read_json(path: Path) -> dict[str, Any]:
    from gpuperf.fileio import read_json_object

    return read_json_object(path, "model config")


_LLAMA_LIKE = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe")
SUPPORTED_TYPES = (*_LLAMA_LIKE, "gpt2", "gpt_neox")


def from_hf_dict(d: dict[str, Any], *, name: str, source: str = "") -> ModelConfig:
    """Map a Hugging Face config dict to ModelConfig; InputError names the missing key."""
    mtype = str(d.get("model_type", "")).lower().replace("-", "_")
    source = source or f"preset {name}"

    def get(*keys: str, default: Any = ...) -> Any:
        for k in keys:
            if d.get(k) is not None:
                return d[k]
        if default is ...:
            raise InputError(f"{source}: missing {keys[0]!r} (model_type {mtype or '?'})")
        return default

    def flag(key: str, default: bool) -> bool:
        """A JSON boolean; a string such as "false" is refused, not read as true."""
        v = d.get(key)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise InputError(f"{source}: {key!r} must be true or false, not {v!r}")
        return v

    def num(*keys: str, default: float) -> float:
        """A finite JSON number (not a string, not a boolean)."""
        v = get(*keys, default=default)
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise InputError(f"{source}: {keys[0]!r} must be a number, not {v!r}")
        return float(v)

    try:
        if mtype in _LLAMA_LIKE:
            return ModelConfig(
                name=name,
                model_type=mtype,
                hidden_size=get("hidden_size"),
                num_hidden_layers=get("num_hidden_layers"),
                num_attention_heads=get("num_attention_heads"),
                num_key_value_heads=get("num_key_value_heads", default=None),
                head_dim=get("head_dim", default=None),
                intermediate_size=get("intermediate_size"),
                vocab_size=get("vocab_size"),
                max_position_embeddings=get("max_position_embeddings", default=2048),
                tie_word_embeddings=flag("tie_word_embeddings", False),
                qkv_bias=flag("attention_bias", mtype.startswith("qwen2")),
                linear_bias=flag("mlp_bias", False),
                num_experts=get("num_local_experts", "num_experts", default=0),
                num_experts_per_tok=get("num_experts_per_tok", default=0),
                rope_theta=num("rope_theta", default=10000.0),
                attention_dropout=num("attention_dropout", default=0.0),
                source=source,
            )
        if mtype == "gpt2":
            h = get("n_embd", "hidden_size")
            return ModelConfig(
                name=name,
                model_type=mtype,
                hidden_size=h,
                num_hidden_layers=get("n_layer", "num_hidden_layers"),
                num_attention_heads=get("n_head", "num_attention_heads"),
                intermediate_size=get("n_inner", "intermediate_size", default=4 * h),
                vocab_size=get("vocab_size"),
                max_position_embeddings=get("n_positions", "max_position_embeddings"),
                tie_word_embeddings=flag("tie_word_embeddings", True),
                mlp="gelu",
                norm="layernorm",
                positions="learned",
                linear_bias=True,
                attention_dropout=num("attn_pdrop", default=0.0),
                hidden_dropout=num("resid_pdrop", default=0.0),
                source=source,
            )
        if mtype == "gpt_neox":
            return ModelConfig(
                name=name,
                model_type=mtype,
                hidden_size=get("hidden_size"),
                num_hidden_layers=get("num_hidden_layers"),
                num_attention_heads=get("num_attention_heads"),
                intermediate_size=get("intermediate_size"),
                vocab_size=get("vocab_size"),
                max_position_embeddings=get("max_position_embeddings", default=2048),
                tie_word_embeddings=flag("tie_word_embeddings", False),
                mlp="gelu",
                norm="layernorm",
                linear_bias=True,
                parallel_residual=flag("use_parallel_residual", True),
                rope_theta=num("rotary_emb_base", "rope_theta", default=10000.0),
                attention_dropout=num("attention_dropout", default=0.0),
                hidden_dropout=num("hidden_dropout", default=0.0),
                source=source,
            )
    except TypeError as exc:  # e.g. a string where a number belongs
        raise InputError(f"{source}: malformed config ({exc})") from None
    close = difflib.get_close_matches(mtype, SUPPORTED_TYPES, n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    raise InputError(
        f"{source}: unsupported model_type {mtype or '(missing)'!r}{hint} "
        f"(supported: {', '.join(SUPPORTED_TYPES)})"
    )
