"""h3block's attention in diffusers' MiniMax-H3 transformer.

    from h3block.diffusers import H3AttnProcessor
    transformer.set_attn_processor(H3AttnProcessor())     # every MiniMaxH3Attention
    block.attn.set_processor(H3AttnProcessor())           # or one

H3AttnProcessor is diffusers' MiniMaxH3AttnProcessor (diffusers 0.42,
models/transformers/transformer_minimax_h3.py) with the attention call
replaced by h3block.attention: the same projections, q/k RMSNorm and RoPE
(diffusers' own _apply_rotary_emb), output projection and dtype. MiniMax-H3
passes no attention mask; a mask is refused rather than ignored.
"""
from . import attention


class H3AttnProcessor:
    """An attention processor for diffusers' MiniMaxH3Attention running FP8
    attention through h3block (BF16 q, k, v; head dim 128)."""

    _attention_backend = None
    _parallel_config = None

    def __init__(self):
        # diffusers' RoPE helper, so that q and k are rotated exactly as its default processor does
        from diffusers.models.transformers.transformer_minimax_h3 import _apply_rotary_emb
        self._rope = _apply_rotary_emb

    def __call__(self, attn, hidden_states, rotary_emb=None, attention_mask=None):
        if attention_mask is not None:
            raise ValueError("H3AttnProcessor: attention_mask is not supported (MiniMax-H3 passes none)")
        if attn.fused_projections:
            query, key, value = attn.to_qkv(hidden_states).chunk(3, dim=-1)
        else:
            query, key, value = attn.to_q(hidden_states), attn.to_k(hidden_states), attn.to_v(hidden_states)
        query = query.unflatten(-1, (attn.heads, -1))
        key = key.unflatten(-1, (attn.heads, -1))
        value = value.unflatten(-1, (attn.heads, -1))
        query = attn.norm_q(query)
        key = attn.norm_k(key)
        if rotary_emb is not None:
            query = self._rope(query, *rotary_emb)
            key = self._rope(key, *rotary_emb)
        dtype = query.dtype
        import torch
        out = attention(query.to(torch.bfloat16), key.to(torch.bfloat16), value.to(torch.bfloat16))
        out = out.flatten(2, 3).to(dtype)
        out = attn.to_out[0](out)
        return attn.to_out[1](out)


def diffusers_state_dict(tensors, heads=None):
    """Our block's tensors (canonical names and layout, docs/DESIGN.md §1: QKV
    grouped per head, fc1 = [gate; up]) -> the state dict of diffusers'
    MiniMaxH3TransformerBlock (to_q/to_k/to_v split, ff.net.0.proj = [up; gate])."""
    qkv = tensors["attn.qkv_proj.weight"]
    d = tensors["attn.q_norm.weight"].shape[0]
    heads = heads or qkv.shape[0] // (3 * d)
    g = qkv.reshape(heads, 3, d, qkv.shape[1])
    gate, up = tensors["mlp.fc1.weight"].chunk(2, dim=0)
    return {
        "norm1.weight": tensors["norm1.weight"],
        "norm2.weight": tensors["norm2.weight"],
        "attn.to_q.weight": g[:, 0].reshape(heads * d, -1),
        "attn.to_k.weight": g[:, 1].reshape(heads * d, -1),
        "attn.to_v.weight": g[:, 2].reshape(heads * d, -1),
        "attn.norm_q.weight": tensors["attn.q_norm.weight"],
        "attn.norm_k.weight": tensors["attn.k_norm.weight"],
        "attn.to_out.0.weight": tensors["attn.out_proj.weight"],
        "ff.net.0.proj.weight": __import__("torch").cat([up, gate], dim=0),
        "ff.net.2.weight": tensors["mlp.fc2.weight"],
        "adaln_proj.linear.weight": tensors["adaln_proj.linear.weight"],
        "adaln_proj.linear.bias": tensors["adaln_proj.linear.bias"],
    }


def load_diffusers_block(path, device="cuda", eps=1e-5, block=0):
    """diffusers' MiniMaxH3TransformerBlock (BF16, on device) with the weights
    of one of our block files (gen_weights' output: canonical names under
    "blocks.<block>.", or with no prefix), its dimensions read from the
    tensors' shapes."""
    import torch
    from safetensors.torch import load_file
    from diffusers.models.transformers.transformer_minimax_h3 import MiniMaxH3TransformerBlock
    t = load_file(path)
    prefix = f"blocks.{block}."
    if any(k.startswith(prefix) for k in t):
        t = {k[len(prefix):]: v for k, v in t.items() if k.startswith(prefix)}
    if "attn.q_norm.weight" not in t:
        raise ValueError(f"{path}: no block {block} (no 'attn.q_norm.weight' under '{prefix}' or without a prefix)")
    d = t["attn.q_norm.weight"].shape[0]
    hidden = t["norm1.weight"].shape[0]
    blk = MiniMaxH3TransformerBlock(hidden_size=hidden, num_attention_heads=t["attn.qkv_proj.weight"].shape[0] // (3 * d),
                                    attention_head_dim=d, ffn_dim=t["mlp.fc2.weight"].shape[1],
                                    time_embed_dim=t["adaln_proj.linear.weight"].shape[1], norm_eps=eps,
                                    qk_norm_eps=eps)
    blk.load_state_dict(diffusers_state_dict(t), strict=True)
    return blk.to(device=device, dtype=torch.bfloat16).eval()


def rotary_emb(positions, rope_freq_dim=16, rope_theta=10000.0):
    """diffusers' (cos, sin) of the block's RoPE for positions [S, 3] (t, h, w)."""
    from diffusers.models.transformers.transformer_minimax_h3 import MiniMaxH3RotaryPosEmbed
    return MiniMaxH3RotaryPosEmbed(rope_freq_dim, rope_theta).to(positions.device)(positions)
