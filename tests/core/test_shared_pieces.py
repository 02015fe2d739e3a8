"""Pieces defined once in core: the run history, the torch-function-mode base and the
registries' `register_<kind>` factory."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from robust_train.core.history import History
from robust_train.core.interception import NOT_INTERCEPTED, CallInterceptor
from robust_train.core.registry import Registry
from robust_train.models.softplus import SmoothReLUs


def test_history_round_trips_through_json_and_merges_later_over_earlier():
    h = History()
    h.add_all(0, {"val/acc": torch.tensor(0.5), "robustness/topk": 0.25})
    h.add("val/acc", 1, 0.75)
    state = json.loads(json.dumps(h.state()))
    assert state == {"val/acc": [[0, 0.5], [1, 0.75]], "robustness/topk": [[0, 0.25]]}
    back = History.from_state(state)
    assert back == h and all(isinstance(e, int) for e, _ in back["val/acc"])
    merged = History.merged([back, {"val/acc": [[2, 0.9]], "empty": []}])
    assert merged["val/acc"] == [(2, 0.9)] and "empty" not in merged
    assert merged["robustness/topk"] == [(0, 0.25)]
    assert History.from_state(None) == {}


def test_an_interceptor_replaces_only_what_it_intercepts_and_passes_keywords_on():
    seen = []

    class Count(CallInterceptor):
        def intercept(self, func, args, kwargs):
            seen.append(func)
            return torch.zeros(1) if func is torch.exp else NOT_INTERCEPTED

    x = torch.tensor([1.0, -1.0])
    with Count():
        replaced = torch.exp(x)
        kept = F.softplus(x, beta=2.0)
    assert torch.equal(replaced, torch.zeros(1))
    assert torch.allclose(kept, F.softplus(x, beta=2.0)) and F.softplus in seen


def test_the_softplus_surrogate_is_such_an_interceptor():
    x = torch.tensor([-1.0, 0.0, 7.0])
    with SmoothReLUs(4.0) as mode:
        out = torch.relu(x) + F.relu6(x) + torch.tanh(x)
    expected = F.softplus(x, 4.0) + F.softplus(x, 4.0) - F.softplus(x - 6.0, 4.0) + torch.tanh(x)
    assert isinstance(mode, CallInterceptor) and mode.calls == 2
    assert torch.allclose(out, expected)


def test_a_registrar_registers_subclasses_under_their_names_and_refuses_the_rest():
    class Base:
        name = ""
        label = "own"

    def no_x(cls: type) -> None:
        if getattr(cls, "x", False):
            raise TypeError(f"{cls.__name__} has x")

    things: Registry[type] = Registry("THINGS", "thing")
    register_thing = things.registrar(Base, attribute="label", keep_own=True, check=no_x)
    assert register_thing.__name__ == "register_thing" and "Base" in (register_thing.__doc__ or "")

    @register_thing("first")
    class First(Base):
        pass

    @register_thing("second")
    class Second(Base):
        label = "kept"

    assert list(things) == ["first", "second"]
    assert (First.label, Second.label) == ("first", "kept")  # keep_own: Second's own label stays
    with pytest.raises(TypeError, match="`third` must be a Base subclass"):
        register_thing("third")(int)
    with pytest.raises(TypeError, match="Bad has x"):
        register_thing("bad")(type("Bad", (Base,), {"x": True}))
    with pytest.raises(ValueError, match="already registered"):
        register_thing("first")(type("Other", (Base,), {}))
    with pytest.raises(ValueError, match="identifier"):
        register_thing("two words")
