"""The Megatron-LM command-line reader, on the flags of NVIDIA/Megatron-LM's example scripts."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from api.megatron_args import parse_megatron_args
from estimator.errors import ValidationError

# examples/gpt3/train_gpt3_175b_distributed.sh with its shell variables expanded
# (GPUS_PER_NODE=8, NUM_NODES=1): GPT-3 175B on TP 8 x PP 16, fp16, no recompute flag.
GPT3_175B = """
torchrun --nproc_per_node 8 --nnodes 1 --master_addr localhost --master_port 6000 \\
    pretrain_gpt.py \\
    --num-layers 96 --hidden-size 12288 --num-attention-heads 96 \\
    --seq-length 2048 --max-position-embeddings 2048 --attention-backend auto \\
    --micro-batch-size 1 --global-batch-size 1536 --rampup-batch-size 16 16 5859375 \\
    --train-iters 500000 --weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95 \\
    --init-method-std 0.006 --clip-grad 1.0 --fp16 --lr 6.0e-5 --lr-decay-style cosine \\
    --min-lr 6.0e-6 --lr-warmup-fraction .001 --lr-decay-iters 430000 \\
    --tensor-model-parallel-size 8 --pipeline-model-parallel-size 16 \\
    --data-path /data/my-gpt3_00_text_document --vocab-file gpt2-vocab.json \\
    --merge-file gpt2-merges.txt --split 949,50,1 --log-interval 100
"""

# examples/llama/train_llama3_8b_h100_fp8.sh (mock-data branch, TP_SIZE=1, CP_SIZE=1).
LLAMA3_8B_FP8 = """
torchrun --nproc_per_node 8 --nnodes 1 --node_rank 0 pretrain_gpt.py
    --use-mcore-models --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336
    --num-attention-heads 32 --group-query-attention --num-query-groups 8 --kv-channels 128
    --seq-length 8192 --max-position-embeddings 8192 --position-embedding-type rope
    --swiglu --untie-embeddings-and-output-weights --disable-bias-linear
    --micro-batch-size 1 --global-batch-size 128 --bf16 --grad-reduce-in-bf16
    --fp8-format hybrid --fp8-amax-history-len 1024 --fp8-param-gather
    --tensor-model-parallel-size 1 --context-parallel-size 1 --sequence-parallel
    --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather
    --mock-data --tokenizer-type NullTokenizer --vocab-size 128256 --split '99,1,0'
"""

# examples/mixtral/train_mixtral_8x7b_distributed.sh (GPUS_PER_NODE=2, one node).
MIXTRAL_SMALL = """
torchrun --nproc_per_node 2 --nnodes 1 pretrain_gpt.py --use-mcore-models
    --disable-bias-linear --seq-length 256 --max-position-embeddings 2048 --num-layers 2
    --hidden-size 256 --ffn-hidden-size 896 --num-attention-heads 2 --swiglu
    --untie-embeddings-and-output-weights --group-query-attention --num-query-groups 2
    --num-experts 2 --moe-router-topk 2 --moe-token-dispatcher-type alltoall
    --overlap-grad-reduce --tokenizer-type Llama2Tokenizer --tokenizer-model tok.model
    --micro-batch-size 1 --global-batch-size 4 --tensor-model-parallel-size 1
    --pipeline-model-parallel-size 1 --expert-model-parallel-size 2
    --use-distributed-optimizer --sequence-parallel
"""


def test_gpt3_175b_script_gives_the_paper_layout_with_data_from_gpus() -> None:
    parsed = parse_megatron_args(GPT3_175B, gpus=1024, vocab_size=50257)
    req = parsed.request
    assert req["model"] == {
        "num_layers": 96,
        "hidden_size": 12288,
        "num_attention_heads": 96,
        "seq_length": 2048,
        "vocab_size": 51200,  # 50257 padded to a multiple of 128·8
        "swiglu": False,
        "tied_embeddings": True,
    }
    assert req["layout"]["pipeline"] == 16
    assert req["layout"]["tensor"] == 8
    assert req["layout"]["data"] == 8  # 1024 / (8·16)
    assert req["layout"]["zero_stage"] == 0
    assert req["training"] == {
        "global_batch_size": 1536,
        "micro_batch_size": 1,
        "recompute": "none",
        "precision": "fp16",
    }
    ignored = next(n for n in parsed.notes if n.startswith("ignored"))
    assert "--rampup-batch-size" in ignored
    assert "--lr" in ignored
    assert "--num-layers" not in ignored


def test_torchrun_world_size_is_used_when_gpus_is_not_given() -> None:
    with pytest.raises(ValidationError) as info:
        parse_megatron_args(GPT3_175B, vocab_size=50257)  # 8 GPUs cannot hold t·p = 128
    assert info.value.field == "--gpus"
    assert "128" in info.value.rule
    line = GPT3_175B.replace("--nnodes 1", "--nnodes 16")
    assert parse_megatron_args(line, vocab_size=50257).request["layout"]["data"] == 1


def test_llama3_8b_fp8_script_reads_gqa_swiglu_untied_and_distributed_optimizer() -> None:
    req = parse_megatron_args(LLAMA3_8B_FP8).request
    model = req["model"]
    assert model["num_query_groups"] == 8
    assert model["ffn_hidden_size"] == 14336
    assert model["swiglu"] is True
    assert model["tied_embeddings"] is False
    assert model["vocab_size"] == 128256  # already a multiple of 128
    assert req["layout"] == {
        "pipeline": 1,
        "tensor": 1,
        "data": 8,
        "virtual_stages": 1,
        "sequence_parallel": True,
        "context_parallel": 1,
        "expert_parallel": 1,
        "zero_stage": 1,
        "overlap_dp": True,
        "overlap_tp": False,
    }
    assert req["training"]["precision"] == "fp8"
    assert "grad_reduce_precision" not in req["training"]  # --grad-reduce-in-bf16


def test_kv_channels_are_the_models_only_where_heads_are_wider_than_h_over_heads() -> None:
    """The Llama 3 example states --kv-channels 128 = 4096 / 32: nothing new. Qwen3's shape
    (32 heads of 128 on --hidden-size 2048) needs it, and the estimate then carries it."""
    assert "kv_channels" not in parse_megatron_args(LLAMA3_8B_FP8).request["model"]
    qwen = LLAMA3_8B_FP8.replace("--hidden-size 4096", "--hidden-size 2048")
    qwen = qwen.replace("--num-query-groups 8", "--num-query-groups 4")
    assert parse_megatron_args(qwen).request["model"]["kv_channels"] == 128


def test_mixtral_script_reads_experts() -> None:
    req = parse_megatron_args(MIXTRAL_SMALL, vocab_size=32000).request
    assert req["model"]["moe_num_experts"] == 2
    assert req["model"]["moe_top_k"] == 2
    assert req["layout"]["expert_parallel"] == 2
    assert req["layout"]["data"] == 2
    assert req["training"]["precision"] == "fp32"


def test_bf16_reduces_gradients_in_fp32_as_megatron_does() -> None:
    line = GPT3_175B.replace("--fp16", "--bf16")
    training = parse_megatron_args(line, gpus=128, vocab_size=50257).request["training"]
    assert training["precision"] == "bf16"
    assert training["grad_reduce_precision"] == "fp32"


def test_virtual_stages_from_layers_per_virtual_stage() -> None:
    line = GPT3_175B + " --num-layers-per-virtual-pipeline-stage 3"
    layout = parse_megatron_args(line, gpus=256, vocab_size=50257).request["layout"]
    assert layout["virtual_stages"] == 2  # 96 / 16 / 3


def test_recompute_flags() -> None:
    sel = parse_megatron_args(GPT3_175B + " --recompute-activations", gpus=128, vocab_size=1)
    assert sel.request["training"]["recompute"] == "selective"
    full = parse_megatron_args(
        GPT3_175B + " --recompute-granularity=full --recompute-method uniform",
        gpus=128,
        vocab_size=1,
    )
    assert full.request["training"]["recompute"] == "full"
    # Read, not ignored: uniform recompute replays every layer, as commest prices it.
    assert not any("--recompute-method" in note for note in full.notes)


def test_missing_vocab_names_the_flag_to_add() -> None:
    with pytest.raises(ValidationError) as info:
        parse_megatron_args(GPT3_175B, gpus=128)
    assert info.value.field == "--vocab-size"


def test_missing_layers_names_the_flag_to_add() -> None:
    with pytest.raises(ValidationError) as info:
        parse_megatron_args("--hidden-size 1024 --num-attention-heads 16", gpus=8, vocab_size=8)
    assert info.value.field == "--num-layers"


def test_unexpanded_shell_variable_is_a_clear_error() -> None:
    with pytest.raises(ValidationError) as info:
        parse_megatron_args("--num-layers $NUM_LAYERS", gpus=8, vocab_size=8)
    assert info.value.field == "--num-layers"
    assert "expand shell variables" in info.value.rule


def test_flags_may_be_a_list_of_tokens_with_equals_values() -> None:
    tokens = [
        "--num-layers=24",
        "--hidden-size=2048",
        "--num-attention-heads=16",
        "--seq-length=4096",
        "--padded-vocab-size=50304",
        "--global-batch-size=512",
        "--micro-batch-size=4",
        "--tensor-model-parallel-size=2",
        "--bf16",
    ]
    req = parse_megatron_args(tokens, gpus=16).request
    assert req["model"]["vocab_size"] == 50304
    assert req["layout"]["data"] == 8
    assert req["training"]["micro_batch_size"] == 4


def test_uneven_first_and_last_stages_are_read() -> None:
    line = (
        GPT3_175B + " --decoder-first-pipeline-num-layers 2 --decoder-last-pipeline-num-layers 10"
    )
    layout = parse_megatron_args(line, gpus=256, vocab_size=50257).request["layout"]
    assert (layout["first_stage_layers"], layout["last_stage_layers"]) == (2, 10)


def test_a_known_flag_without_its_value_is_named() -> None:
    with pytest.raises(ValidationError) as info:
        parse_megatron_args("--num-layers --hidden-size 1024", gpus=8, vocab_size=8)
    assert info.value.field == "--num-layers"
    assert info.value.rule == "needs a value"


def test_a_script_with_comments_continuations_and_underscore_spellings() -> None:
    script = """#!/bin/bash
# GPT-3 1.3B on one node
export CUDA_DEVICE_MAX_CONNECTIONS=1
torchrun --nproc_per_node=8 --nnodes 2 pretrain_gpt.py \\
    --num_layers 24 --hidden-size 2048 \\
    --num-attention-heads=16 --seq-length 2048   # the context
    --micro-batch-size 2 --global-batch-size 512 --bf16 \\
    --tensor-model-parallel-size 2 --lr=1e-4 --eval-iters 10 --use-flash-attn
"""
    parsed = parse_megatron_args(script, vocab_size=50257)
    req = parsed.request
    assert req["model"]["num_layers"] == 24
    assert req["model"]["num_attention_heads"] == 16
    assert req["layout"]["data"] == 8  # 2 nodes x 8 / t=2
    assert req["training"]["micro_batch_size"] == 2
    ignored = next(n for n in parsed.notes if n.startswith("ignored"))
    assert ignored.endswith("--lr --eval-iters --use-flash-attn")


def test_expert_tensor_parallel_size_is_kept_only_where_it_is_not_the_layers() -> None:
    """--expert-tensor-parallel-size 1 under TP 2 folds the experts over TP; equal to the
    layer's TP it is Megatron's default and says nothing new."""
    folded = MIXTRAL_SMALL.replace(
        "--tensor-model-parallel-size 1", "--tensor-model-parallel-size 2"
    )
    folded = folded.replace("--nproc_per_node 2", "--nproc_per_node 4")
    stated = folded + " --expert-tensor-parallel-size 1"
    layout = parse_megatron_args(stated, vocab_size=32000).request["layout"]
    assert (layout["tensor"], layout["expert_tensor_parallel"]) == (2, 1)
    same = folded + " --expert-tensor-parallel-size 2"
    assert (
        "expert_tensor_parallel"
        not in parse_megatron_args(same, vocab_size=32000).request["layout"]
    )


def test_token_dispatcher_type_is_read_for_moe_models() -> None:
    """--moe-token-dispatcher-type flex (DeepEP / HybridEP) and alltoall are kept; allgather
    moves every routed copy as an all-to-all does, so it is priced so and a note says it."""
    flex = parse_megatron_args(
        MIXTRAL_SMALL + " --moe-token-dispatcher-type flex", vocab_size=32000
    )
    assert flex.request["training"]["moe_token_dispatcher"] == "flex"
    gather = parse_megatron_args(
        MIXTRAL_SMALL + " --moe-token-dispatcher-type allgather", vocab_size=32000
    )
    assert "moe_token_dispatcher" not in gather.request["training"]
    assert any("allgather: priced as alltoall" in note for note in gather.notes)


def test_expert_capacity_is_the_load_factor_only_when_padded_to_it() -> None:
    """--moe-expert-capacity-factor with --moe-pad-expert-input-to-capacity makes every expert
    run capacity x the mean load (training.moe_capacity_factor); without padding it only caps
    the busiest expert, so balanced routing stays assumed and a note says so."""
    padded = parse_megatron_args(
        MIXTRAL_SMALL + " --moe-expert-capacity-factor 1.25 --moe-pad-expert-input-to-capacity",
        vocab_size=32000,
    )
    assert padded.request["training"]["moe_capacity_factor"] == 1.25
    capped = parse_megatron_args(
        MIXTRAL_SMALL + " --moe-expert-capacity-factor 1.25", vocab_size=32000
    )
    assert "moe_capacity_factor" not in capped.request["training"]
    assert any("caps the busiest expert" in note for note in capped.notes)
    below = parse_megatron_args(
        MIXTRAL_SMALL + " --moe-expert-capacity-factor 0.5 --moe-pad-expert-input-to-capacity",
        vocab_size=32000,
    )
    assert "moe_capacity_factor" not in below.request["training"]
    assert any("drops tokens" in note for note in below.notes)
    for bad in ("abc", "0", "inf"):
        with pytest.raises(ValidationError, match="--moe-expert-capacity-factor"):
            parse_megatron_args(
                MIXTRAL_SMALL + f" --moe-expert-capacity-factor {bad}", vocab_size=32000
            )


def test_performance_flags_commest_does_not_price_get_a_note_each() -> None:
    """Delayed weight gradients and block-scaled FP8 are recognised and each named with what
    the estimate leaves out, not lumped with unknown flags; CUDA graphs, which the estimate does
    price (they lift the eager MoE host floor), are named with what they do; the EP overlap,
    priced, is a framework flag and no note."""
    line = (
        MIXTRAL_SMALL
        + " --fp8-format hybrid --fp8-recipe blockwise --overlap-moe-expert-parallel-comm"
        " --delay-wgrad-compute --cuda-graph-impl transformer_engine"
    )
    notes = parse_megatron_args(line, vocab_size=32000).notes
    for flag, says in (
        ("--fp8-recipe blockwise", "priced as per-tensor FP8"),
        ("--delay-wgrad-compute", "priced where the backward pass runs them"),
        ("--cuda-graph-impl transformer_engine", "host time is not priced"),
    ):
        assert any(note.startswith(flag + ":") and says in note for note in notes), flag
    assert not any("overlap-moe" in note for note in notes), (
        "a recognised, priced flag is neither listed as ignored nor noted"
    )
    # Off, or per-tensor FP8, says nothing.
    quiet = parse_megatron_args(
        MIXTRAL_SMALL + " --fp8-format hybrid --fp8-recipe tensorwise --cuda-graph-impl none",
        vocab_size=32000,
    ).notes
    assert not any("fp8-recipe" in n or "cuda-graph" in n for n in quiet)


# Megatron-LM examples/moe_recipes: Qwen3-30B-A3B, EP 8 inside each node, eager (32 GPUs).
QWEN3_30B = """
torchrun --nproc_per_node 8 --nnodes 4 pretrain_gpt.py --use-mcore-models
    --num-layers 48 --hidden-size 2048 --ffn-hidden-size 6144 --num-attention-heads 32
    --group-query-attention --num-query-groups 4 --kv-channels 128 --qk-layernorm
    --seq-length 4096 --max-position-embeddings 4096 --swiglu --disable-bias-linear
    --untie-embeddings-and-output-weights --num-experts 128 --moe-router-topk 8
    --moe-ffn-hidden-size 768 --moe-token-dispatcher-type flex --moe-grouped-gemm
    --expert-model-parallel-size 8 --tensor-model-parallel-size 1
    --micro-batch-size 1 --global-batch-size 256 --bf16 --use-distributed-optimizer
    --overlap-grad-reduce --overlap-param-gather
"""


@pytest.mark.parametrize(
    ("flags", "captured"),
    [
        ("", None),
        ("--cuda-graph-impl none", None),
        ("--cuda-graph-impl none --cuda-graph-scope moe_router", None),
        ("--cuda-graph-impl transformer_engine", True),  # Megatron's default scope: whole layers
        ("--cuda-graph-impl transformer_engine --cuda-graph-scope attn", None),
        ("--cuda-graph-impl transformer_engine --cuda-graph-scope attn mamba", None),
        ("--cuda-graph-impl transformer_engine --cuda-graph-scope attn moe_router", True),
        ("--cuda-graph-impl local --cuda-graph-scope moe_preprocess", True),
        ("--cuda-graph-impl local --cuda-graph-scope full_iteration", True),
        ("--enable-cuda-graph", True),
        ("--external-cuda-graph --cuda-graph-scope attn", None),
    ],
)
def test_cuda_graphs_that_capture_a_moe_layer_lift_its_host_floor(
    flags: str, captured: bool | None
) -> None:
    """--cuda-graph-impl with a scope that takes in the MoE router or preprocessing (or whole
    layers, the default) sets training.framework_overrides.cuda_graphs; a scope of attention
    only leaves the MoE layers eager, and says so."""
    parsed = parse_megatron_args(QWEN3_30B + " " + flags, vocab_size=151936)
    overrides = parsed.request["training"]["framework_overrides"]
    # The line's --overlap-param-gather is a framework flag too.
    assert overrides == {
        "overlap_param_gather": True,
        **({"cuda_graphs": True} if captured else {}),
    }
    graph_notes = [n for n in parsed.notes if "graph" in n]
    if "none" in flags or not flags:
        assert graph_notes == []
    elif captured:
        assert len(graph_notes) == 1 and "host time is not priced" in graph_notes[0]
    else:
        assert len(graph_notes) == 1 and "leave the MoE layers eager" in graph_notes[0]


def test_the_estimate_of_a_graphed_moe_line_has_no_host_wait(client: TestClient) -> None:
    """End to end: the eager Qwen3-30B-A3B line waits on the host (breakdown term host), the
    same line with the router and preprocessing graphed does not, and is faster for it."""

    def estimate(flags: str) -> dict[str, float]:
        parsed = parse_megatron_args(QWEN3_30B + " " + flags, vocab_size=151936)
        body = {**parsed.request, "cluster": {"profile": "dgx-h100-nominal"}}
        response = client.post("/v1/estimates", json=body)
        assert response.status_code == 200, response.text
        answer = response.json()
        return {"host": answer["breakdown_s"]["host"], "total": answer["iteration_time_s"]}

    eager = estimate("")
    graphed = estimate("--cuda-graph-impl transformer_engine --cuda-graph-scope attn moe_router")
    attention_only = estimate("--cuda-graph-impl transformer_engine --cuda-graph-scope attn")
    assert eager["host"] > 0.05 * eager["total"]
    assert graphed["host"] == 0.0
    # Faster by at most the wait: the wait had also hidden data-parallel time under it.
    assert eager["total"] - eager["host"] <= graphed["total"] < eager["total"]
    assert attention_only == eager


def test_a_cuda_graph_impl_megatron_does_not_have_is_refused_by_name() -> None:
    with pytest.raises(ValidationError, match="--cuda-graph-impl") as caught:
        parse_megatron_args(QWEN3_30B + " --cuda-graph-impl cudnn", vocab_size=151936)
    assert "none, local or transformer_engine" in str(caught.value)


def test_an_unknown_cuda_graph_scope_is_named_and_leaves_moe_layers_eager() -> None:
    parsed = parse_megatron_args(
        QWEN3_30B + " --cuda-graph-impl transformer_engine --cuda-graph-scope attn dense_mlp",
        vocab_size=151936,
    )
    assert "cuda_graphs" not in parsed.request["training"]["framework_overrides"]
    assert any(n.startswith("--cuda-graph-scope dense_mlp: not a scope") for n in parsed.notes)


def test_overlap_param_gather_is_read_as_the_framework_flag_not_ignored() -> None:
    """--overlap-param-gather hides the distributed optimizer's parameter all-gather under the
    next forward pass: the megatron-lm preset leaves it off, so the line turns it on."""
    parsed = parse_megatron_args(QWEN3_30B, vocab_size=151936)
    assert parsed.request["training"]["framework_overrides"] == {"overlap_param_gather": True}
    assert not any("--overlap-param-gather" in note for note in parsed.notes)
    without = parse_megatron_args(
        QWEN3_30B.replace("--overlap-param-gather", ""), vocab_size=151936
    )
    assert "framework_overrides" not in without.request["training"]


@pytest.mark.parametrize(
    ("flags", "recompute", "replayed", "says"),
    [
        (
            "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1",
            "full",
            None,
            None,
        ),
        (
            "--recompute-granularity full --recompute-method uniform --recompute-num-layers 4",
            "full",
            None,
            "keeps one input per 4 layers and replays them 4 at a time",
        ),
        (
            "--recompute-granularity full --recompute-method block --recompute-num-layers 48",
            "full",
            None,
            None,
        ),
        (
            "--recompute-granularity full --recompute-method block --recompute-num-layers 5",
            "full",
            5,
            None,
        ),
        (
            "--recompute-granularity full --recompute-method block --recompute-num-layers 0",
            "none",
            None,
            "no layer is recomputed",
        ),
        (
            "--pipeline-model-parallel-size 4 --recompute-granularity full "
            "--recompute-method block --recompute-num-layers 5",
            "full",
            5,
            None,
        ),
        (
            "--recompute-granularity selective --recompute-modules core_attn",
            "selective",
            None,
            None,
        ),
        (
            "--recompute-granularity selective --recompute-modules moe_act layernorm",
            "selective",
            None,
            "--recompute-modules moe_act layernorm: priced as selective recompute of the "
            "attention core",
        ),
    ],
)
def test_partial_recompute_is_priced_or_named_with_what_the_estimate_prices_instead(
    flags: str, recompute: str, replayed: int | None, says: str | None
) -> None:
    """Megatron's block recompute replays only the first N layers of each chunk: the request
    carries N (``training.recompute_num_layers``) when it is fewer than a chunk holds. Its
    selective recompute can name other modules than the attention core: commest prices
    attention-core recompute, and a note says so rather than the flags being ignored."""
    parsed = parse_megatron_args(QWEN3_30B + " " + flags, vocab_size=151936, gpus=32)
    assert parsed.request["training"]["recompute"] == recompute
    assert parsed.request["training"].get("recompute_num_layers") == replayed
    recompute_notes = [n for n in parsed.notes if n.startswith("--recompute")]
    assert not any("recompute" in n for n in parsed.notes if n.startswith("ignored"))
    if says is None:
        assert recompute_notes == []
    else:
        assert len(recompute_notes) == 1 and says in recompute_notes[0], recompute_notes


# Megatron-LM examples/moe_recipes: Qwen3-235B-A22B on 256 H100s (TP 2, PP 8, VP 4, EP 32).
QWEN3_235B = """
torchrun --nproc_per_node 8 --nnodes 32 pretrain_gpt.py --use-mcore-models
    --num-layers 94 --hidden-size 4096 --ffn-hidden-size 12288 --num-attention-heads 64
    --group-query-attention --num-query-groups 4 --kv-channels 128 --seq-length 4096
    --max-position-embeddings 4096 --swiglu --untie-embeddings-and-output-weights
    --num-experts 128 --moe-router-topk 8 --moe-ffn-hidden-size 1536
    --tensor-model-parallel-size 2 --pipeline-model-parallel-size 8
    --virtual-pipeline-model-parallel-size 4 --expert-model-parallel-size 32
    --expert-tensor-parallel-size 1 --sequence-parallel
    --micro-batch-size 1 --global-batch-size 8192 --bf16 --use-distributed-optimizer
"""


@pytest.mark.parametrize(
    ("flags", "first", "last"),
    [
        ("--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split", 11, 11),
    ],
)
def test_embedding_and_loss_counted_in_the_pipeline_split_give_uneven_stages(
    flags: str, first: int, last: int
) -> None:
    """(94 + 2) layers over 8 stages of 4 chunks: 3 a chunk, the first chunk one short for the
    embedding and the last for the loss, so the first and last stages hold 11, the others 12
    (Megatron-Core's account_for_*_in_pipeline_split)."""
    layout = parse_megatron_args(QWEN3_235B + " " + flags, vocab_size=151936).request["layout"]
    assert (layout["first_stage_layers"], layout["last_stage_layers"]) == (first, last)


def test_one_accounted_end_needs_the_split_to_divide_and_no_explicit_stage_sizes() -> None:
    # 94 + 1 = 95 does not split over 8·4 chunks.
    with pytest.raises(ValidationError, match="account-for-embedding") as uneven:
        parse_megatron_args(
            QWEN3_235B + " --account-for-embedding-in-pipeline-split", vocab_size=151936
        )
    assert "95 must be a multiple of pipeline · virtual stages = 32" in str(uneven.value)
    with pytest.raises(ValidationError, match="decoder-first-pipeline-num-layers"):
        parse_megatron_args(
            QWEN3_235B.replace("--num-layers 94", "--num-layers 95")
            + " --account-for-embedding-in-pipeline-split --decoder-first-pipeline-num-layers 11",
            vocab_size=151936,
        )
    # 95 + 1 = 96 splits: the first stage 12 - 1 = 11 layers, no last-stage change.
    layout = parse_megatron_args(
        QWEN3_235B.replace("--num-layers 94", "--num-layers 95")
        + " --account-for-embedding-in-pipeline-split",
        vocab_size=151936,
    ).request["layout"]
    assert layout["first_stage_layers"] == 11 and "last_stage_layers" not in layout


def test_a_235b_line_with_its_split_estimates_like_the_recorded_layout(client: TestClient) -> None:
    """The line's uneven split is one the engine takes (first/last stages 11 of 94 layers)."""
    parsed = parse_megatron_args(
        QWEN3_235B
        + " --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split",
        vocab_size=151936,
    )
    body = {**parsed.request, "cluster": {"profile": "dgx-h100-nominal"}}
    response = client.post("/v1/estimates", json=body)
    assert response.status_code == 200, response.text
    stated = parse_megatron_args(
        QWEN3_235B
        + " --decoder-first-pipeline-num-layers 11 --decoder-last-pipeline-num-layers 11",
        vocab_size=151936,
    )
    same = client.post(
        "/v1/estimates", json={**stated.request, "cluster": {"profile": "dgx-h100-nominal"}}
    )
    assert same.status_code == 200, same.text
    assert response.json()["iteration_time_s"] == same.json()["iteration_time_s"]


@pytest.mark.parametrize(
    ("flags", "zero"),
    [
        ("", 1),  # the distributed optimizer
        ("--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params", 3),
        ("--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads", 2),
        ("--use-megatron-fsdp --data-parallel-sharding-strategy optim", 1),
        ("--use-megatron-fsdp --data-parallel-sharding-strategy no_shard", 1),
        ("--use-megatron-fsdp", 1),  # Megatron's default strategy: no_shard
        ("--use-custom-fsdp --data-parallel-sharding-strategy optim_grads_params", 3),
        ("--data-parallel-sharding-strategy optim_grads_params", 1),  # without Megatron-FSDP
        ("--use-torch-fsdp2", 3),
    ],
)
def test_megatron_fsdp_sharding_strategies_are_zero_stages(flags: str, zero: int) -> None:
    """Megatron-FSDP's sharding strategy names what it shards: optimizer states (ZeRO-1), and
    gradients (2), and parameters (3); PyTorch FSDP2 shards all three."""
    parsed = parse_megatron_args(QWEN3_30B + " " + flags, vocab_size=151936)
    assert parsed.request["layout"]["zero_stage"] == zero
    assert not any("fsdp" in n or "sharding" in n for n in parsed.notes if n.startswith("ignored"))


def test_an_unknown_megatron_fsdp_strategy_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ValidationError, match="--data-parallel-sharding-strategy") as caught:
        parse_megatron_args(
            QWEN3_30B + " --use-megatron-fsdp --data-parallel-sharding-strategy full_shard",
            vocab_size=151936,
        )
    assert "optim_grads_params" in str(caught.value)


@pytest.mark.parametrize(
    ("flags", "overrides"),
    [
        ("", {}),
        ("--no-gradient-accumulation-fusion", {"grad_accum_fusion": False}),
        ("--no-overlap-p2p-communication", {}),  # no interleaving: nothing to overlap
        (
            "--num-layers-per-virtual-pipeline-stage 3 --no-overlap-p2p-communication",
            {"overlap_p2p": False},
        ),
        (
            "--no-gradient-accumulation-fusion --no-overlap-p2p-communication "
            "--virtual-pipeline-model-parallel-size 2",
            {"grad_accum_fusion": False, "overlap_p2p": False},
        ),
    ],
)
def test_megatrons_on_by_default_switches_turned_off_become_framework_flags(
    flags: str, overrides: dict[str, bool]
) -> None:
    """Gradient-accumulation fusion and the interleaved schedule's p2p overlap are on in
    Megatron (and in the megatron-lm preset) unless a --no- flag turns them off; the p2p
    overlap only matters, and is only set, with interleaving."""
    parsed = parse_megatron_args(GPT3_175B + " " + flags, gpus=1024, vocab_size=50257)
    assert parsed.request["training"].get("framework_overrides", {}) == overrides
    assert not any("--no-" in note for note in parsed.notes if note.startswith("ignored"))


def _gpt3_seconds(client: TestClient, flags: str) -> float:
    """The estimate of the GPT-3 175B line with ``flags`` added, on the nominal A100 profile."""
    parsed = parse_megatron_args(GPT3_175B + " " + flags, gpus=1024, vocab_size=50257)
    body = {**parsed.request, "cluster": {"profile": "dgx-a100-nominal"}}
    response = client.post("/v1/estimates", json=body)
    assert response.status_code == 200, response.text
    return float(response.json()["iteration_time_s"])


def test_no_gradient_accumulation_fusion_costs_time_in_the_estimate(client: TestClient) -> None:
    """Without the fusion Megatron adds each micro-batch's weight gradients in a pass of its
    own: the same line estimates slower."""
    assert _gpt3_seconds(client, "--no-gradient-accumulation-fusion") > _gpt3_seconds(client, "")


@pytest.mark.parametrize(
    ("flags", "noted"),
    [
        ("--context-parallel-size 2 --cp-comm-type a2a", True),
        ("--context-parallel-size 2 --cp-comm-type p2p", False),
        ("--context-parallel-size 2 --cp-comm-type p2p a2a+p2p", True),
        ("--cp-comm-type a2a", False),  # no context parallelism: nothing to say
    ],
)
def test_context_parallel_communication_other_than_the_ring_is_named(
    flags: str, noted: bool
) -> None:
    line = LLAMA3_8B_FP8.replace("--context-parallel-size 1", "") + " " + flags
    parsed = parse_megatron_args(line, gpus=16)
    notes = [n for n in parsed.notes if n.startswith("--cp-comm-type")]
    assert len(notes) == int(noted)
    if noted:
        assert "priced as the ring (p2p)" in notes[0]


@pytest.mark.parametrize(
    ("line", "gathered_fp8"),
    [
        (LLAMA3_8B_FP8, True),
        (LLAMA3_8B_FP8.replace(" --fp8-param-gather", ""), False),
        # no FP8 training: the weights stay 16-bit, so nothing is gathered as FP8
        (LLAMA3_8B_FP8.replace("--fp8-format hybrid --fp8-amax-history-len 1024", ""), False),
    ],
)
def test_fp8_param_gather_is_read_as_the_framework_flag(line: str, gathered_fp8: bool) -> None:
    """--fp8-param-gather: the distributed optimizer gathers FP8 weights, 1 byte each
    (Framework.fp8_param_gather); it is priced, so no note calls it unmodelled or ignored."""
    parsed = parse_megatron_args(line, gpus=8)
    overrides = parsed.request["training"].get("framework_overrides", {})
    assert overrides.get("fp8_param_gather", False) is gathered_fp8
    assert not any("--fp8-param-gather" in n for n in parsed.notes)


def test_block_recompute_of_part_of_each_stage_estimates_between_none_and_full(
    client: TestClient,
) -> None:
    """--recompute-method block --recompute-num-layers N replays N of each chunk's layers: the
    line's estimate lies between the same line without recompute and with every layer's."""
    full = "--recompute-granularity full --recompute-method "
    assert (
        _gpt3_seconds(client, "")
        < _gpt3_seconds(client, full + "block --recompute-num-layers 2")
        < _gpt3_seconds(client, full + "uniform --recompute-num-layers 1")
    )


@pytest.mark.parametrize(
    ("flags", "overlapped"),
    [(" --overlap-moe-expert-parallel-comm", True), ("", False)],
)
def test_the_ep_overlap_is_read_as_the_framework_flag(flags: str, overlapped: bool) -> None:
    """--overlap-moe-expert-parallel-comm hides a measured share of the expert all-to-alls
    under another micro-batch's compute (Framework.ep_comm_overlap); no note calls it
    unmodelled."""
    parsed = parse_megatron_args(QWEN3_30B + flags, vocab_size=151936)
    overrides = parsed.request["training"].get("framework_overrides", {})
    assert overrides.get("ep_comm_overlap", False) is overlapped
    assert not any("overlap_moe_expert_parallel_comm" in n for n in parsed.notes)


@pytest.mark.parametrize(
    ("flags", "current"),
    [
        (" --fp8-format hybrid --fp8-recipe tensorwise", True),
        (" --fp8-format hybrid --fp8-recipe delayed", False),
        (" --fp8-format hybrid", False),  # Megatron's default recipe is delayed scaling
        (" --bf16 --fp8-recipe tensorwise", False),  # no FP8 training: nothing is quantized
    ],
)
def test_fp8_current_scaling_is_read_as_the_framework_flag(flags: str, current: bool) -> None:
    """--fp8-recipe tensorwise is Transformer Engine's current scaling, which quantizes each
    local expert's tensors by kernels of their own (Framework.fp8_current_scaling)."""
    parsed = parse_megatron_args(QWEN3_30B + flags, vocab_size=151936)
    overrides = parsed.request["training"].get("framework_overrides", {})
    assert overrides.get("fp8_current_scaling", False) is current
