"""GET /v1/presets/models and /v1/presets/gpus."""

from __future__ import annotations

from fastapi.testclient import TestClient

from estimator.flops import model_parameters
from estimator.presets import GPU_PRESETS, MODEL_PRESETS


def test_model_presets_list_every_preset_with_its_shape(client: TestClient) -> None:
    response = client.get("/v1/presets/models")
    assert response.status_code == 200
    by_key = {p["key"]: p for p in response.json()}
    assert set(by_key) == set(MODEL_PRESETS)
    gpt3 = by_key["gpt3-175b"]
    assert gpt3["spec"]["num_layers"] == 96 and gpt3["spec"]["hidden_size"] == 12288
    assert 170e9 < gpt3["parameters"] < 180e9
    assert gpt3["source"]
    # The count an estimate reports, from the layer shapes (not SC21 eq. 2, which knows neither
    # GQA nor gated MLPs nor experts): Mixtral's 46.7B, Qwen3-30B-A3B's 30.5B.
    for key in ("mixtral-8x7b", "qwen3-30b-a3b", "llama3-70b"):
        preset = by_key[key]
        assert preset["parameters"] == model_parameters(MODEL_PRESETS[key].spec), key
        assert abs(preset["parameters"] / preset["published_parameters"] - 1.0) < 0.02, key


def test_gpu_presets_give_peak_tflops_per_precision(client: TestClient) -> None:
    response = client.get("/v1/presets/gpus")
    assert response.status_code == 200
    by_key = {p["key"]: p for p in response.json()}
    assert set(by_key) == set(GPU_PRESETS)
    assert by_key["a100-sxm4-80gb"]["peak_tflops"]["fp16"] == 312.0
    assert by_key["a100-sxm4-80gb"]["memory_bytes"] == 80e9
