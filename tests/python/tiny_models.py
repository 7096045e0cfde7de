"""Tiny transformers models with random weights for the tests: the shapes are small enough that a
test spends its time in trident's host path, not in the model, and no weights are downloaded."""
import torch


def tiny_cuda_llama(dtype=torch.bfloat16):
    """A 2-layer Llama on CUDA (bf16 unless told) with sdpa attention and seed 0, in eval mode:
    (config, model)."""
    import transformers

    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return cfg, transformers.LlamaForCausalLM(cfg).cuda().to(dtype).eval()


def tiny_cpu_llama():
    """A 2-layer float32 Llama on the CPU (vocabulary 96, pad token 0) with seed 0, in eval mode:
    (config, model)."""
    import transformers

    cfg = transformers.LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                   pad_token_id=0)
    torch.manual_seed(0)
    return cfg, transformers.LlamaForCausalLM(cfg).eval()
