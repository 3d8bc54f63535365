"""MaxPool2x2 against PyTorch's own max_pool2d: equal values with and without autograd,
equal gradients, and the small CNN's forward unchanged by it."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fedspectral.models import SmallCNN
from fedspectral.models.pool import MaxPool2x2


def _inputs() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    relu = torch.randn(6, 3, 28, 28, generator=g).relu()  # many tied zeros
    ties = torch.randint(0, 3, (4, 2, 9, 7), generator=g).float()  # odd sizes, ties
    neg = -torch.rand(2, 5, 4, 6, generator=g)  # all-negative windows
    nan = torch.rand(1, 1, 4, 4, generator=g)
    nan[0, 0, 1, 2] = float("nan")
    last = relu.contiguous(memory_format=torch.channels_last)
    unbatched = torch.randn(3, 5, 5, generator=g)
    return [relu, ties, neg, nan, last, unbatched]


@pytest.mark.parametrize(
    "x", _inputs(), ids=["relu", "ties-odd", "negative", "nan", "channels_last", "unbatched"]
)
def test_no_grad_values_equal_max_pool2d(x: torch.Tensor) -> None:
    with torch.no_grad():
        got = MaxPool2x2()(x)
    want = F.max_pool2d(x, 2)
    assert got.shape == want.shape
    assert torch.equal(got.isnan(), want.isnan())
    assert torch.equal(torch.nan_to_num(got), torch.nan_to_num(want))


def test_with_autograd_values_and_gradients_equal_max_pool2d() -> None:
    """Tied inputs: the strided-maximum path would split a tie's gradient between the
    tied elements (torch.maximum's backward), max_pool2d gives it all to the first."""
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 4, (3, 2, 7, 8), generator=g).float()
    w = torch.randn(3, 2, 3, 4, generator=g)
    a = x.clone().requires_grad_(True)
    b = x.clone().requires_grad_(True)
    ya, yb = MaxPool2x2()(a), F.max_pool2d(b, 2)
    assert ya.requires_grad and torch.equal(ya, yb)
    (ya * w).sum().backward()
    (yb * w).sum().backward()
    assert torch.equal(a.grad, b.grad)


def test_too_small_map_is_refused_by_name() -> None:
    with torch.no_grad(), pytest.raises(ValueError, match="at least 2 x 2"):
        MaxPool2x2()(torch.rand(1, 1, 1, 5))


def test_small_cnn_forward_equals_the_max_pool2d_network() -> None:
    torch.manual_seed(0)
    net = SmallCNN(1, "group", 8)
    ref = SmallCNN(1, "group", 8)
    ref.body = nn.Sequential(
        *(nn.MaxPool2d(2) if isinstance(m, MaxPool2x2) else m for m in ref.body)
    )
    ref.load_state_dict(net.state_dict())
    assert sum(isinstance(m, nn.MaxPool2d) for m in ref.body) == 2
    x = torch.rand(70, 1, 28, 28, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert torch.equal(net(x), ref(x))
    net(x).square().sum().backward()
    ref(x).square().sum().backward()
    for p, q in zip(net.parameters(), ref.parameters(), strict=True):
        assert torch.equal(p.grad, q.grad)


def test_both_no_grad_forms_equal_max_pool2d_on_even_maps() -> None:
    """A contiguous even map takes the row-pair-then-column-pair form, a strided view of
    the same values the four-way form; both equal max_pool2d on distinct values (every
    window's maximum in each of its four positions) and propagate a NaN."""
    g = torch.Generator().manual_seed(3)
    base = torch.randn(5, 3, 6, 8, generator=g)
    for pos in ((0, 0), (0, 1), (1, 0), (1, 1)):  # put each window's max at one corner
        x = base.clone()
        x[..., pos[0] :: 2, pos[1] :: 2] += 10.0
        x[1, 2, 2 + pos[0], 4 + pos[1]] = float("nan")
        strided = x.transpose(-1, -2).contiguous().transpose(-1, -2)  # same values, not contiguous
        assert x.is_contiguous() and not strided.is_contiguous()
        want = F.max_pool2d(x, 2)
        with torch.no_grad():
            for got in (MaxPool2x2()(x), MaxPool2x2()(strided), MaxPool2x2()(x[0])):
                w = want if got.ndim == 4 else want[0]
                assert torch.equal(got.isnan(), w.isnan())
                assert torch.equal(torch.nan_to_num(got), torch.nan_to_num(w))
