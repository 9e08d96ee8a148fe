"""Built-in models (gpt, mlp, cnn; resnet18/34/50 in train/run/resnets.py) and user factories ("package.module:factory")."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn as nn
import torch.nn.functional as F

from envkit.errors import EnvkitError
from envkit.train.run.resnets import build_resnet
from envkit.train.user_code import accepted_args, import_factory

if TYPE_CHECKING:
    from torch.nn.attention.flex_attention import BlockMask

    from envkit.facts.model import TrainDevice


# ---------------------------------------------------------------- gpt (nanoGPT-shaped)


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, dropout, bias):
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(n_embd, 3 * n_embd, bias=bias)
        self.proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.dropout = dropout
        self.resid_drop = nn.Dropout(dropout)
        self.flex_mask: BlockMask | None = None  # a causal BlockMask where FlexAttention replaces SDPA in compiled steps (use_flex_attention)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        mask = self.flex_mask
        if mask is not None and torch.compiler.is_compiling() and mask.shape[-2] == T:
            y = flex_attention()(q, k, v, block_mask=mask)
        else:  # eager (eval, a run without compile), or another length: PyTorch's fused kernels
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True)
        return self.resid_drop(self.proj(y.transpose(1, 2).contiguous().view(B, T, C)))


def flex_attention():
    from torch.nn.attention.flex_attention import flex_attention as flex

    return flex


def use_flex_attention(model: nn.Module, device: torch.device) -> int:
    """Causal FlexAttention in every attention layer of envkit's gpt, where the step is compiled (eager
    code, eval included, keeps SDPA). Returns the layers switched. Its Triton backward computes dQ in one
    pass over the keys and dK, dV in one over the queries, without atomics, where cuDNN's attention (SDPA's
    choice on Hopper) is refused under use_deterministic_algorithms and FlashAttention-2's deterministic
    backward took 0.43 ms a layer against cuDNN's 0.23 (benchmarks/RESULTS.md). A deterministic run's
    attention on CUDA (determinism.flex_attention_for)."""
    from torch.nn.attention.flex_attention import create_block_mask

    layers = [m for m in model.modules() if isinstance(m, CausalSelfAttention)]
    if not layers or getattr(model, "block_size", None) is None or any(m.dropout for m in layers):
        return 0  # flex_attention has no dropout

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    T = int(model.block_size)  # pyright: ignore[reportArgumentType] - envkit's GPT's int attribute
    mask = create_block_mask(causal, None, None, T, T, device=device)
    for m in layers:
        m.flex_mask = mask
    return len(layers)


class Block(nn.Module):
    def __init__(self, n_embd, n_head, dropout, bias):
        super().__init__()
        self.ln1 = nn.LayerNorm(n_embd, bias=bias)
        self.attn = CausalSelfAttention(n_embd, n_head, dropout, bias)
        self.ln2 = nn.LayerNorm(n_embd, bias=bias)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd, bias=bias), nn.GELU(),
                                 nn.Linear(4 * n_embd, n_embd, bias=bias), nn.Dropout(dropout))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """Decoder-only transformer: token + position embeddings, pre-LN blocks, tied output head."""

    def __init__(self, vocab_size, block_size=64, n_layer=4, n_head=4, n_embd=128, dropout=0.0, bias=False):
        super().__init__()
        self.block_size, self.n_layer, self.n_head, self.n_embd = block_size, n_layer, n_head, n_embd
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(n_embd, n_head, dropout, bias) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd, bias=bias)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying
        self.apply(self._init)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    @staticmethod
    def _init(module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    # forward in three parts, so compile_scope blocks can compile the blocks and the head apart (step.BlockwiseLoss)
    def embed(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        return self.drop(self.wte(idx) + self.wpe(pos))

    def head(self, x):
        return self.lm_head(self.ln_f(x))

    def forward(self, idx):
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x)
        return self.head(x)

    def flops_per_token(self, seq_len: int | None = None) -> float:
        """6N + 12*L*H*Q*T (PaLM appendix B, as nanoGPT/nanochat), N without position embeddings."""
        n = sum(p.numel() for p in self.parameters()) - self.wpe.weight.numel()
        T = seq_len or self.block_size
        return 6 * n + 12 * self.n_layer * self.n_head * (self.n_embd // self.n_head) * T


# ---------------------------------------------------------------- mlp


class MLP(nn.Module):
    def __init__(self, input_dim, num_classes, hidden=256, depth=2, dropout=0.0):
        super().__init__()
        layers, width = [], input_dim
        for _ in range(depth):
            layers += [nn.Linear(width, hidden), nn.GELU()] + ([nn.Dropout(dropout)] if dropout else [])
            width = hidden
        layers.append(nn.Linear(width, num_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x.flatten(1))


# ---------------------------------------------------------------- cnn (small ResNet for 32x32)


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = nn.Sequential()
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.short(x))


class ResNet(nn.Module):
    """ResNet for 32x32 inputs: a 3x3 stem and three stages (width, 2*width, 4*width)."""

    def __init__(self, num_classes, in_channels=3, width=32, blocks=1):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_channels, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        stages, cin = [], width
        for i, cout in enumerate((width, 2 * width, 4 * width)):
            for j in range(blocks):
                stages.append(BasicBlock(cin, cout, 2 if (j == 0 and i > 0) else 1))
                cin = cout
        self.stages = nn.Sequential(*stages)
        self.head = nn.Linear(cin, num_classes)

    def forward(self, x):
        x = self.stages(self.stem(x))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def narrow_strided_conv(model: nn.Module) -> bool:
    """Whether the model has a strided convolution over fewer than 8 channels (a width-4 cnn's 1x1
    shortcut). Its channels-last backward corrupts the heap on the CPU (torch 2.13.0+cpu, oneDNN on an
    AVX2 AMD EPYC: `Conv2d(4, 8, 1, stride=2)` in channels-last dies within 20 backward passes with
    "double free or corruption", contiguous it does not; 8 channels and more, or stride 1, are fine),
    so `channels_last: auto` keeps such a model contiguous on the CPU. Too narrow to be faster anyway."""
    return any(isinstance(c, nn.Conv2d) and max(c.stride) > 1 and c.in_channels < 8 for c in model.modules())


BUILT_IN = ("gpt", "mlp", "cnn", "resnet18", "resnet34", "resnet50")
DEVICE_INIT_SHARE = 0.5  # of the GPU's memory the fp32 weights may take for the model to be initialised there


def build_model_for(cfg, info: dict, device: torch.device, device_type: TrainDevice) -> tuple[nn.Module, bool]:
    """(the model, whether it was initialised on `device`). On CUDA, envkit's own models are built and
    initialised on the GPU when their fp32 weights take at most DEVICE_INIT_SHARE of its memory: the
    random draws of GPT-2 small's 124M parameters (the layers' default uniform_, then normal_) take 5-7 s
    on the CPU and milliseconds on the GPU, and the 6.7B GPT's minutes (benchmarks/RESULTS.md). The
    same seed on the same kind of device gives the same weights in every mode and process count (ddp,
    fsdp, 1-N processes: the decision reads the model's size and the GPU's total memory, not what is
    free), but not the CPU's: a CUDA run starts from other weights than a CPU run of one config.
    Elsewhere (the CPU, MPS, a user's factory, whose code may assume the CPU, a GPT too large for one
    GPU) the model is built on the CPU, as it always was. `device_type` is `device`'s type."""
    if device_type != "cuda" or cfg.model.type not in BUILT_IN:
        return build_model(cfg, info, device_type), False
    if cfg.model.type == "gpt" and "vocab_size" in info:
        m = cfg.model  # the weights' count, near enough for a share of the memory (a meta build would cost 2 s of torch imports)
        weights = 4 * (info["vocab_size"] * m.n_embd + m.block_size * m.n_embd + 12 * m.n_layer * m.n_embd ** 2)
        if weights > DEVICE_INIT_SHARE * torch.cuda.get_device_properties(device).total_memory:
            return build_model(cfg, info, device_type), False
    with torch.device(device):  # the other built-in models are tens of millions of parameters at their sizes
        return build_model(cfg, info, device_type), True


def build_model(cfg, info: dict, device_type: TrainDevice) -> nn.Module:
    """info comes from the data: vocab_size, num_classes, input_dim, in_channels."""
    m = cfg.model
    kind = m.type
    if kind == "gpt":
        if "vocab_size" not in info:
            raise EnvkitError("model gpt needs a token dataset (text or synthetic arithmetic)", where="model.type")
        return GPT(info["vocab_size"], m.block_size, m.n_layer, m.n_head, m.n_embd, m.dropout, m.bias)
    if kind == "mlp":
        return MLP(info["input_dim"], info["num_classes"], m.hidden, m.depth, m.dropout)
    if kind in ("cnn", "resnet18", "resnet34", "resnet50"):
        if kind == "cnn":
            model = ResNet(info["num_classes"], info.get("in_channels", 3), m.width, m.blocks)
        else:
            width = m.width if cfg.origin_of("model.width").by_user else 64  # the schema's 32 is cnn's
            model, source = build_resnet(int(kind[6:]), info["num_classes"], info.get("in_channels", 3), m.stem, width)
            model.definition = source  # pyright: ignore[reportArgumentType] - "torchvision" or "envkit", for the trainer's log: a plain attribute, where Module.__setattr__'s stub takes tensors and modules
        cl = m.channels_last
        # auto: everywhere envkit trains convolutions; on this repository's 2-core CPU too, ResNet-18 trained
        # 6% faster at width 64 and 8% at width 8 in channels-last (benchmarks/RESULTS.md)
        if cl is True or (cl == "auto" and device_type in ("cuda", "mps") or cl == "auto" and device_type == "cpu"
                          and not narrow_strided_conv(model)):
            model = model.to(memory_format=torch.channels_last)  # pyright: ignore[reportCallIssue] - Module.to takes memory_format, its stub's overloads do not
        return model
    factory = import_factory(kind, "model")
    model = factory(**(m.kwargs or {}), **{k: v for k, v in info.items() if k in accepted_args(factory)})
    if not isinstance(model, nn.Module):
        raise EnvkitError(f"{kind} returned {type(model).__name__}, not a torch.nn.Module", where="model.type")
    return model
