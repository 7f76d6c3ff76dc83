"""Training logs read as measurements, on real published logs (fixtures/training_logs/README.md).

Iteration times are exact: the median of the logged ``elapsed time per iteration (ms)`` values
the rules keep, so the expected numbers are read off the fixture lines themselves.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from estimator.errors import ParseError, ValidationError
from profiles.training_logs import LogHints, ParsedTrainingLog, parse_training_log

FIXTURES = Path(__file__).parent / "fixtures" / "training_logs"
GPT2 = "megatron_lm_gpt2_345m_tp2_pp2.txt"
LLAMA_DS = "megatron_deepspeed_llama_tp2_pp2.txt"


def _text(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def _reasons(parsed: ParsedTrainingLog) -> dict[int, str]:
    return {d.iteration: d.reason for d in parsed.dropped}


def test_megatron_lm_gpt2_log_gives_the_request_and_the_steady_median() -> None:
    parsed = parse_training_log(_text(GPT2))
    assert parsed.format == "megatron-lm"
    assert parsed.request == {
        "model": {
            "num_layers": 24,
            "hidden_size": 1024,
            "num_attention_heads": 16,
            "seq_length": 1024,
            "vocab_size": 50432,  # "> padded vocab (size: 50257) with 175 dummy tokens"
            "swiglu": False,
            "tied_embeddings": True,
            "ffn_hidden_size": 4096,
        },
        "layout": {
            "pipeline": 2,
            "tensor": 2,
            "data": 1,
            "virtual_stages": 1,
            "sequence_parallel": True,
            "context_parallel": 1,
            "expert_parallel": 1,
            "zero_stage": 0,
            "overlap_dp": False,
            "overlap_tp": False,
        },
        "training": {
            "global_batch_size": 16,
            "micro_batch_size": 4,
            "recompute": "none",
            "precision": "fp16",
        },
    }
    # Logged: 100 -> 858.6 ms (warm-up), 200 -> 1082.6, 1000 -> 1109.8, 1100 -> 839.6 (holds
    # the evaluation at 1000), 2000 -> 1031.7; the median of the three kept is 1082.6 ms.
    assert parsed.iterations_used == [200, 1000, 2000]
    assert parsed.iteration_time_s == pytest.approx(1.0826, abs=1e-12)
    assert _reasons(parsed) == {100: "warm-up", 1100: "evaluation"}
    assert any("50257 -> 50432" in n for n in parsed.notes)
    assert any("iteration 2000 of 5000" in w for w in parsed.warnings)
    assert parsed.complete
    assert [m.query_parameter for m in parsed.missing] == ["gpus_per_node"]


def test_megatron_deepspeed_llama_log_reads_zero_stage_and_drops_overflow_intervals() -> None:
    parsed = parse_training_log(_text(LLAMA_DS))
    assert parsed.format == "megatron-deepspeed"
    model, layout = parsed.request["model"], parsed.request["layout"]
    assert (model["num_layers"], model["hidden_size"], model["ffn_hidden_size"]) == (24, 2048, 5504)
    assert model["swiglu"] is True and model["tied_embeddings"] is False
    assert model["vocab_size"] == 32000
    assert "num_query_groups" not in model  # num_key_value_heads 16 = heads: no GQA
    assert (layout["tensor"], layout["pipeline"], layout["data"], layout["zero_stage"]) == (
        2,
        2,
        2,
        0,
    )
    # 1-3 are warm-up; "Overflow detected. Skipping step" precedes 2499 and 2500.
    assert parsed.iterations_used == [2498]
    assert parsed.iteration_time_s == pytest.approx(1.2103, abs=1e-12)
    assert _reasons(parsed) == {
        1: "warm-up",
        2: "warm-up",
        3: "warm-up",
        2499: "skipped iterations",
        2500: "skipped iterations",
    }


def _decorate(text: str, prefix: str, newline: str) -> str:
    lines = [prefix + line for line in text.split("\n")]
    return "```text" + newline + newline.join(lines) + newline + "```" + newline


@pytest.mark.parametrize(
    ("prefix", "newline"),
    [("[default0]:", "\r\n"), ("0: ", "\n"), ("[1,0]<stdout>:", "\r\n"), ("[rank0]:", "\n")],
)
def test_prefixes_crlf_and_fences_read_the_same_run(prefix: str, newline: str) -> None:
    plain = parse_training_log(_text(GPT2))
    decorated = parse_training_log(_decorate(_text(GPT2), prefix, newline))
    assert decorated.request == plain.request
    assert decorated.iteration_time_s == plain.iteration_time_s
    assert decorated.content_sha256 == plain.content_sha256


def test_ansi_colours_are_removed() -> None:
    coloured = _text(GPT2).replace(" iteration ", " \x1b[32miteration\x1b[0m ")
    assert parse_training_log(coloured).iterations_used == [200, 1000, 2000]


def test_a_run_that_crashed_uses_the_intervals_before_the_traceback() -> None:
    text = _text(GPT2)
    nan_line = (
        " iteration     2100/    5000 | consumed samples:        33600 | elapsed time per "
        "iteration (ms): 990.0 | learning rate: 9.7E-05 | global batch size:    16 | lm loss: "
        "nan | loss scale: 1.0 | grad norm: nan | number of skipped iterations:   0 | number of "
        "nan iterations:  12 |"
    )
    crash = (
        "Traceback (most recent call last):\n"
        '  File "pretrain_gpt.py", line 150, in <module>\n'
        "RuntimeError: NCCL communicator was aborted on rank 3.\n"
    )
    parsed = parse_training_log(text + "\n" + nan_line + "\n" + crash)
    assert _reasons(parsed)[2100] == "NaN"
    assert parsed.iterations_used == [200, 1000, 2000]
    assert any("crashed" in w and "after iteration 2100" in w for w in parsed.warnings)


def test_a_missing_padded_vocab_line_is_named_with_its_query_parameter() -> None:
    text = re.sub(r".*padded vocab.*\n", "", _text(GPT2))
    parsed = parse_training_log(text)
    assert not parsed.complete
    missing = {m.query_parameter: m.field for m in parsed.missing if m.required}
    assert missing == {"vocab_size": "model.vocab_size"}
    hinted = parse_training_log(text, LogHints(vocab_size=50257))
    assert hinted.complete
    assert hinted.request["model"]["vocab_size"] == 50432  # padded to 128 · t = 256


def test_missing_precision_and_layout_lines_are_named_and_hints_fill_them() -> None:
    text = re.sub(r".*\b(fp16|bf16|tensor_model_parallel_size) \.\.\..*\n", "", _text(GPT2))
    parsed = parse_training_log(text)
    required = {m.query_parameter for m in parsed.missing if m.required}
    assert required == {"precision", "tensor"}
    hinted = parse_training_log(text, LogHints(precision="bf16", tensor=2))
    assert hinted.complete
    assert hinted.request["training"]["precision"] == "bf16"
    assert hinted.request["layout"]["tensor"] == 2


def test_a_hint_that_contradicts_the_log_is_ignored_with_a_warning() -> None:
    parsed = parse_training_log(_text(GPT2), LogHints(tensor=4, micro_batch_size=4))
    assert parsed.request["layout"]["tensor"] == 2
    assert any("tensor_model_parallel_size" in w for w in parsed.warnings)
    assert not any("micro_batch_size" in w for w in parsed.warnings)  # agrees with the log


def test_bad_hints_are_validation_errors() -> None:
    with pytest.raises(ValidationError) as info:
        parse_training_log(_text(GPT2), LogHints(precision="fp12"))
    assert info.value.field == "precision"
    with pytest.raises(ValidationError):
        parse_training_log(_text(GPT2), LogHints(gpus=0))


def test_batch_ramp_up_intervals_are_left_out() -> None:
    text = _text(GPT2).replace(
        "elapsed time per iteration (ms): 1082.6 | learning rate: 8.672E-06 | global batch size:    16",
        "elapsed time per iteration (ms): 1082.6 | learning rate: 8.672E-06 | global batch size:     8",
    )
    parsed = parse_training_log(text)
    assert _reasons(parsed)[200] == "batch ramp-up (global batch 8)"
    assert parsed.iterations_used == [1000, 2000]


def test_a_log_holding_two_runs_is_read_from_the_last() -> None:
    parsed = parse_training_log(_text(GPT2) + "\n" + _text(LLAMA_DS))
    assert parsed.format == "megatron-deepspeed"
    assert parsed.request["model"]["vocab_size"] == 32000
    assert any("2 arguments blocks" in w for w in parsed.warnings)


def test_warmup_iterations_zero_keeps_every_clean_interval() -> None:
    parsed = parse_training_log(_text(GPT2), LogHints(warmup_iterations=0))
    assert 200 in parsed.iterations_used
    assert _reasons(parsed)[100] == "skipped iterations"  # its line: 15 skipped iterations


@pytest.mark.parametrize(
    "name",
    [
        "megatron_llm_issue11_iterations.txt",
        "megatron_lm_issue756_mixtral_iterations.txt",
        "megatron_deepspeed_issue396_nan_grad_norm.txt",
    ],
)
def test_iteration_lines_without_an_arguments_block_are_a_parse_error(name: str) -> None:
    with pytest.raises(ParseError) as info:
        parse_training_log(_text(name))
    message = str(info.value)
    assert "no arguments block" in message
    assert "elapsed time per iteration" in message  # quotes a line it saw
    assert info.value.lines


def test_an_arguments_block_without_iterations_is_a_parse_error() -> None:
    with pytest.raises(ParseError) as info:
        parse_training_log(_text("megatron_lm_issue756_mixtral_arguments_head.txt"))
    assert "no end line" in str(info.value)
    assert "iteration" in str(info.value)


@pytest.mark.parametrize("text", ["", "   \n", "hello\nworld\n", "Epoch 1: loss 2.3\n"])
def test_text_without_training_iterations_is_a_parse_error_quoting_it(text: str) -> None:
    with pytest.raises(ParseError) as info:
        parse_training_log(text)
    assert "expected a Megatron-LM log" in str(info.value)
    if text.strip():
        assert text.split()[0] in str(info.value)


def test_nemo_step_timing_with_hints_gives_a_complete_request() -> None:
    text = _text("nemo_bionemo_pr740_step_timing.txt")
    with pytest.raises(ParseError, match="warmup_iterations=0"):
        parse_training_log(text)  # global_step 120-125: all within 10 steps of the start
    bare = parse_training_log(text, LogHints(warmup_iterations=0))
    assert bare.format == "nemo"
    # median of 0.03146 0.03163 0.03215 0.03157 0.0317 0.03147 = (0.03157 + 0.03163) / 2
    assert bare.iteration_time_s == pytest.approx(0.0316, abs=1e-12)
    assert bare.request["training"]["global_batch_size"] == 1  # from the step lines
    required = {m.query_parameter for m in bare.missing if m.required}
    assert {"num_layers", "hidden_size", "vocab_size", "gpus", "precision"} <= required
    hints = LogHints(
        warmup_iterations=0,
        num_layers=6,
        hidden_size=320,
        num_attention_heads=20,
        seq_length=1024,
        vocab_size=33,
        gpus=1,
        tensor=1,
        pipeline=1,
        micro_batch_size=1,
        precision="bf16",
    )
    full = parse_training_log(text, hints)
    assert full.complete
    assert full.request["layout"]["data"] == 1


def test_nemo_config_lines_are_read_with_nemo_spellings() -> None:
    config = (
        "trainer:\n  devices: 8\n  num_nodes: 2\n  precision: bf16-mixed\nmodel:\n"
        "  micro_batch_size: 2\n  global_batch_size: 256\n  tensor_model_parallel_size: 4\n"
        "  pipeline_model_parallel_size: 2\n  encoder_seq_length: 4096\n  num_layers: 32\n"
        "  hidden_size: 4096\n  num_attention_heads: 32\n  activation: fast-swiglu\n"
        "  share_embeddings_and_output_weights: false\n"
        "  activations_checkpoint_granularity: selective\n"
    )
    steps = "".join(
        f"Epoch 0: 10%| {s}/100 [00:10<01:30, reduced_train_loss=2.1, global_step={s}.0, "
        f"consumed_samples={256 * s}.0, train_step_timing in s={t}]\n"
        for s, t in [(20, 9.0), (40, 3.5), (60, 3.25), (80, 3.75)]
    )
    parsed = parse_training_log(config + steps, LogHints(vocab_size=32000))
    assert parsed.request["layout"]["data"] == 2  # 16 GPUs / (4 · 2)
    assert parsed.request["model"]["seq_length"] == 4096
    assert parsed.request["model"]["swiglu"] is True
    assert parsed.request["model"]["tied_embeddings"] is False
    assert parsed.request["training"]["precision"] == "bf16"
    assert parsed.request["training"]["recompute"] == "selective"
    assert parsed.iteration_time_s == pytest.approx(3.5)
    assert parsed.complete


def test_twenty_megabytes_of_noise_is_a_parse_error_and_noise_around_a_log_is_ignored() -> None:
    # Near misses for every marker the readers look for, and over-long lines.
    noise_lines = [
        "iteration " * 50 + "/ |",
        " elapsed time per iteration (ms): | " * 20,
        "  argument " + "." * 3000 + " ",
        "using world size: " + "9" * 30,
        "padded vocab (size: " + "1" * 40,
        "x" * 9000,
        "[default0]:[rank1]:0: [1,0]<stdout>: warning: something",
    ]
    block = "\n".join(noise_lines) + "\n"
    noise = block * (20_000_000 // len(block) + 1)
    assert len(noise) >= 20_000_000
    with pytest.raises(ParseError):
        parse_training_log(noise.replace("elapsed time per iteration (ms)", "elapsed"))
    parsed = parse_training_log(noise + _text(GPT2) + noise)
    assert parsed.iterations_used == [200, 1000, 2000]
    assert any("longer than" in w for w in parsed.warnings)


@pytest.mark.parametrize("name", [GPT2, LLAMA_DS])
def test_the_request_read_is_an_estimate_requests_model_layout_and_training(name: str) -> None:
    from api.schemas import EstimateRequest  # the contract the request must meet

    parsed = parse_training_log(_text(name))
    cluster = {"gpus_per_node": 8, "peak_tflops": 312, "utilization": 0.5}
    body = EstimateRequest.model_validate({**parsed.request, "cluster": cluster})
    assert body.model_dump(include={"model", "layout", "training"}, exclude_unset=True) == (
        parsed.request
    )


def test_a_logs_performance_settings_commest_does_not_price_are_noted_only_when_on() -> None:
    """Megatron prints every argument: CUDA graphs off ("none"), no capacity factor ("None")
    and the EP overlap off say nothing; delayed weight gradients on are named, and the EP
    all-to-all overlap on is read as the framework flag that prices it."""
    extra = (
        "  cuda_graph_impl ................................. none\n"
        "  delay_wgrad_compute ............................. True\n"
        "  moe_expert_capacity_factor ...................... None\n"
        "  overlap_moe_expert_parallel_comm ................ {overlap}\n"
    )

    def parsed_with(overlap: bool) -> ParsedTrainingLog:
        text = _text(GPT2).replace(
            "  num_layers ...................................... 24\n",
            "  num_layers ...................................... 24\n"
            + extra.format(overlap=overlap),
        )
        assert text != _text(GPT2)
        return parse_training_log(text)

    plain = parse_training_log(_text(GPT2))
    off, on = parsed_with(False), parsed_with(True)
    assert off.request == plain.request
    assert on.request["training"]["framework_overrides"] == {"ep_comm_overlap": True}
    for parsed in (off, on):
        assert [n for n in parsed.notes if "delay_wgrad_compute" in n] == [
            "delay_wgrad_compute: the weight-gradient GEMMs are priced where the backward pass "
            "runs them"
        ]
        assert not any(
            "cuda_graph" in n or "capacity" in n or "overlap_moe" in n for n in parsed.notes
        )


@pytest.mark.parametrize(
    ("scope", "captured"),
    [("['attn']", False), ("['attn', 'moe_router']", True), ("[]", True)],
)
def test_a_logs_cuda_graph_scope_list_is_read_as_megatron_prints_it(
    scope: str, captured: bool
) -> None:
    """A log prints cuda_graph_scope as a Python list; graphs that take in the MoE router (or
    whole layers: an empty list is Megatron's default) set framework_overrides.cuda_graphs,
    and on a dense model the note says they change nothing."""
    extra = (
        "  cuda_graph_impl ................................. transformer_engine\n"
        f"  cuda_graph_scope ................................ {scope}\n"
    )
    text = _text(GPT2).replace(
        "  num_layers ...................................... 24\n",
        "  num_layers ...................................... 24\n" + extra,
    )
    assert text != _text(GPT2)
    parsed = parse_training_log(text)
    overrides = parsed.request["training"].get("framework_overrides")
    assert overrides == ({"cuda_graphs": True} if captured else None)
    graph_notes = [n for n in parsed.notes if n.startswith("cuda_graph_impl transformer_engine")]
    assert len(graph_notes) == 1 and "dense model" in graph_notes[0]


@pytest.mark.parametrize(
    ("settings", "recompute", "replayed", "says"),
    [
        (("full", "block", "4", None), "full", 4, None),
        (("full", "block", "0", None), "none", None, "recompute_num_layers 0: no layer"),
        (("full", "uniform", "1", None), "full", None, None),
        (("selective", "None", "1", "['core_attn']"), "selective", None, None),
        (
            ("selective", "None", "1", "['moe_act', 'layernorm']"),
            "selective",
            None,
            "moe_act layernorm",
        ),
    ],
)
def test_a_logs_partial_recompute_settings_are_read(
    settings: tuple[str, str, str, str | None],
    recompute: str,
    replayed: int | None,
    says: str | None,
) -> None:
    """The log's recompute_method / recompute_num_layers / recompute_modules (a printed list)
    are read as the command line's: block recompute of 4 of a stage's 12 layers is priced as
    such (training.recompute_num_layers 4); modules other than the attention core are named."""
    granularity, method, count, modules = settings
    block = (
        f"  recompute_granularity ........................... {granularity}\n"
        f"  recompute_method ................................ {method}\n"
        f"  recompute_num_layers ............................ {count}\n"
    )
    if modules is not None:
        block += f"  recompute_modules ............................... {modules}\n"
    text = _text(GPT2).replace(
        "  recompute_granularity ........................... None\n"
        "  recompute_method ................................ None\n"
        "  recompute_num_layers ............................ 1\n",
        block,
    )
    assert text != _text(GPT2)
    parsed = parse_training_log(text)
    assert parsed.request["training"]["recompute"] == recompute
    assert parsed.request["training"].get("recompute_num_layers") == replayed
    notes = [n for n in parsed.notes if n.startswith("recompute_")]
    if says is None:
        assert notes == []
    else:
        assert len(notes) == 1 and says in notes[0], notes


def test_a_logs_gradient_accumulation_fusion_off_is_the_framework_flag() -> None:
    """A log prints the switch's value: False (Megatron-FSDP runs turn it off) sets
    framework_overrides.grad_accum_fusion, True (this log's) leaves the preset's."""
    on = parse_training_log(_text(GPT2))
    assert "framework_overrides" not in on.request["training"]
    off_text = _text(GPT2).replace(
        "  gradient_accumulation_fusion .................... True\n",
        "  gradient_accumulation_fusion .................... False\n",
    )
    assert off_text != _text(GPT2)
    off = parse_training_log(off_text)
    assert off.request["training"]["framework_overrides"] == {"grad_accum_fusion": False}
