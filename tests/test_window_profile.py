"""`python -m bench window`'s grouping (bench/window_profile.py): an operator counts to the nearest of
itself and its callers that names a group, and what the fast attention runs without naming one is its bookkeeping
(made-up profiler events, no model)."""

from __future__ import annotations

from dataclasses import dataclass

from bench import window_profile as profile_window


@dataclass
class Event:
    name: str
    cpu_parent: "Event | None" = None
    self_cpu_time_total: float = 0.0  # microseconds, as torch.profiler reports them


def test_operators_count_to_their_nearest_named_caller():
    attention = Event(profile_window.ATTENTION_SCOPE)
    projections = Event(profile_window.PROJECTION_SCOPE, attention)
    events = [
        Event("aten::copy_", Event("aten::addmm", Event("aten::linear")), 2e6),  # the bias copied into the output
        Event("aten::copy_", Event("aten::_to_copy", Event("aten::to")), 1e6),
        Event("aten::cat", projections, 3e6),
        Event("aten::cat", attention, 4e6),  # the band's keys and values
        Event("aten::fill_", Event("aten::constant_pad_nd", Event("aten::pad", attention)), 5e5),
        Event("aten::bitwise_and", Event("aten::__and__", attention), 2.5e5),
        Event("aten::copy_", Event("aten::clone"), 1e5),
        Event("aten::native_layer_norm", Event("aten::layer_norm"), 7e5),
        Event("aten::unknown_op", None, 1e4),
    ]
    groups = profile_window.grouped_self_time_s(events)
    assert groups["matmul (Linear layers with their bias; the GELU too where prepacked_linear fuses it)"]["self_s"] == 2.0
    assert groups["dtype casts"]["self_s"] == 1.0
    assert groups[profile_window.WEIGHT_CAT]["self_s"] == 3.0
    assert groups[profile_window.BOOKKEEPING]["operators_s"] == {"aten::cat": 4.0}
    assert groups["padding"]["self_s"] == 0.5 and groups["masks"]["self_s"] == 0.25
    assert groups["copies (outside the attention)"]["self_s"] == 0.1 and groups["LayerNorm"]["self_s"] == 0.7
    assert groups["other"]["operators_s"] == {"aten::unknown_op": 0.01}
    assert list(groups)[0] == profile_window.BOOKKEEPING  # heaviest first


@dataclass
class ShapedEvent:
    name: str
    input_shapes: list
    self_cpu_time_total: float  # microseconds


def test_linear_layers_are_summed_per_rows_and_shape():
    events = [ShapedEvent("mkldnn::_linear_pointwise", [[1, 4096, 768], [3840, 768], [3840]], 2e4),
              ShapedEvent("mkldnn::_linear_pointwise", [[1, 4096, 768], [3840, 768], [3840]], 3e4),
              ShapedEvent("mkldnn::_linear_pointwise", [[1, 24, 768], [768, 768], [768]], 1e3),  # global queries
              ShapedEvent("aten::addmm", [[768], [4096, 768], [768, 768]], 4e4),  # bias, x, weight transposed
              ShapedEvent("mkldnn::_linear_pointwise", [[1, 4096, 3072], [1, 4096, 768], [768, 3072], [768]], 5e4),
              # the fused residual add: (x, residual, weight, bias)
              ShapedEvent("aten::add", [[1, 4096, 768], [1, 4096, 768]], 9e4)]
    shapes = profile_window.linear_by_shape(events)
    assert set(shapes) == {"4096x768->3840", "24x768->768", "4096x768->768", "4096x3072->768"}
    assert shapes["4096x768->3840"] == {"self_s": 0.05, "calls": 2, "flops": 2 * 2.0 * 4096 * 768 * 3840}
    assert shapes["4096x768->768"]["flops"] == 2.0 * 4096 * 768 * 768
