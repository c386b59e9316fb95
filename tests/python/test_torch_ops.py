"""graft.torch's ops and the exporter conversions it adds (graft/torch/_symbolic.py): losses and
addmv the TorchScript exporter cannot export at opset 17, checked against torch."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import graft.torch as poptorch  # noqa: E402

CASES = {
    "l1": lambda x, t, s: F.l1_loss(x, t),
    "unary": lambda x, t, s: torch.acosh(x + 1.5) + torch.asinh(s * x) + torch.atanh(x * 0.9) + torch.cosh(x)
    + torch.sinh(s * x) + torch.erfc(s * x) + torch.expm1(x) + torch.frac(3 * s * x) + torch.trunc(3 * s * x),
    "nansum": lambda x, t, s: torch.nansum(torch.where(s > 0, x, torch.full_like(x, float("nan")))),
    "nansum_dim": lambda x, t, s: torch.nansum(torch.where(s > 0, x, torch.full_like(x, float("nan"))), dim=1,
                                               keepdim=True),
    "count_nonzero": lambda x, t, s: torch.count_nonzero(torch.relu(s), dim=0),
    "addmv": lambda x, t, s: torch.addmv(x[0], t.T, s[:, 1], beta=0.5, alpha=2.0),
    "bce": lambda x, t, s: F.binary_cross_entropy(x, t),
    "bce_weight_sum": lambda x, t, s: F.binary_cross_entropy(x, t, weight=t, reduction="sum"),
    "smooth_l1": lambda x, t, s: F.smooth_l1_loss(x * 3, t, beta=0.5),
    "smooth_l1_none": lambda x, t, s: F.smooth_l1_loss(x * 3, t, reduction="none"),
    "soft_margin": lambda x, t, s: F.soft_margin_loss(x, s),
    "hinge_embedding": lambda x, t, s: F.hinge_embedding_loss(x, s, margin=0.7),
    "margin_ranking": lambda x, t, s: F.margin_ranking_loss(x, t, s, margin=0.1),
    "poisson_nll_full": lambda x, t, s: F.poisson_nll_loss(x, t * 3, log_input=True, full=True),
    "poisson_nll": lambda x, t, s: F.poisson_nll_loss(x, t * 3, log_input=False),
    "triplet_margin": lambda x, t, s: F.triplet_margin_loss(x, t, s, margin=0.3),
    "triplet_margin_swap_p1": lambda x, t, s: F.triplet_margin_loss(x, t, s, p=1, swap=True, reduction="sum"),
}


class Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def inputs():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(4, 5, generator=g) * 0.9 + 0.05
    t = torch.rand(4, 5, generator=g)
    s = torch.sign(torch.randn(4, 5, generator=g))
    return x, t, s


@pytest.mark.parametrize("name", sorted(CASES))
def test_added_conversions_match_torch(name):
    args = inputs()
    got = poptorch.inferenceModel(Fn(CASES[name]))(*args)
    np.testing.assert_allclose(got.numpy(), CASES[name](*args).numpy(), atol=1e-5, rtol=1e-4)


def test_added_loss_trains_like_torch():
    torch.manual_seed(5)
    lin = torch.nn.Linear(5, 5)
    ref = torch.nn.Linear(5, 5)
    ref.load_state_dict(lin.state_dict())

    class Net(torch.nn.Module):
        def __init__(self, lin):
            super().__init__()
            self.lin = lin

        def forward(self, x, t):
            return F.smooth_l1_loss(self.lin(x), t, beta=0.5)

    x, t, _ = inputs()
    model = poptorch.trainingModel(Net(lin), optimizer=torch.optim.SGD(lin.parameters(), lr=0.5))
    opt = torch.optim.SGD(ref.parameters(), lr=0.5)
    for _ in range(3):
        loss = model(x, t)
        opt.zero_grad()
        t_loss = F.smooth_l1_loss(ref(x), t, beta=0.5)
        t_loss.backward()
        opt.step()
        np.testing.assert_allclose(float(loss), float(t_loss), atol=1e-6, rtol=1e-5)
    np.testing.assert_allclose(lin.weight.detach().numpy(), ref.weight.detach().numpy(), atol=1e-6)


def test_ops_pass_through():
    x = torch.randn(3, 2)
    assert poptorch.nop(x) is x and poptorch.ipu_print_tensor(x) is x
    assert poptorch.set_available_memory(x, 0.5) is x
    out = poptorch.for_loop(3, lambda a: a * 2, [x])
    np.testing.assert_allclose(out[0].numpy(), (x * 8).numpy())
    branch = poptorch.cond(torch.tensor(True), lambda a: a + 1, [x], lambda a: a - 1, [x])
    np.testing.assert_allclose(branch[0].numpy(), (x + 1).numpy())
    assert poptorch.recomputationCheckpoint(x) is x


class _Call(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


SHAPE_CASES = {
    # torch.roll without dims rolls the flattened tensor; shifts larger than the dimension wrap.
    "roll_flat": (lambda x: torch.roll(x, 1), (2, 3, 4)),
    "roll_wraps": (lambda x: torch.roll(x, 10, 1), (2, 4, 5)),
    "roll_negative_two_dims": (lambda x: torch.roll(x, (-7, 2), (0, -1)), (3, 3, 4)),
    # chunk: 13 into 6 gives five pieces (3, 3, 3, 3, 1)
    "chunk_fewer_pieces": (lambda x: torch.chunk(x, 6), (13,)),
    "chunk_even": (lambda x: torch.chunk(x, 3, dim=1), (2, 12)),
    "take_along_dim_flat": (lambda x: torch.take_along_dim(x, torch.argmax(x)), (2, 3)),
    "take_along_dim_broadcast": (lambda x: torch.take_along_dim(x, torch.tensor([[2, 0, 1, 0]]), dim=1), (2, 3)),
    "threshold": (lambda x: torch.nn.functional.threshold(x, 0.3, -2.0), (4,)),
    "cumprod": (lambda x: torch.cumprod(x, dim=1), (2, 5)),
    "cumsum_out": (lambda x: torch.cumsum(x, dim=0, out=torch.empty(x.shape, dtype=torch.int32)), (3, 2)),
    "addmv_zero_beta": (lambda x: torch.addmv(torch.full((3,), float("nan")), x, x[0], beta=0.0), (3, 3)),
    "median_dim": (lambda x: torch.median(x, dim=1), (3, 6)),
    "median_all": (lambda x: torch.median(x), (3, 6)),
    "addcdiv": (lambda x: torch.addcdiv(x, x, x + 3.0, value=-0.5), (2, 3)),
    "fold": (torch.nn.Fold(output_size=(4, 5), kernel_size=(2, 3), padding=1, stride=(2, 1)), (2, 18, 15)),
    "fold_unbatched_dilated": (torch.nn.Fold(output_size=(5, 5), kernel_size=2, dilation=2, stride=2), (8, 4)),
    "nansum_half": (lambda x: torch.nansum(torch.where(x > 0, x, torch.full_like(x, float("nan"))), dtype=torch.float16),
                    (3, 4)),
    "all_of_numbers": (lambda x: (torch.all((x > 0).to(torch.int64)), torch.all((x > 0).long(), dim=1)), (3, 4)),
    # in-place ops on the module's inputs
    "inplace_on_inputs": (lambda x: (x.add_(1.0), x.clone().mul_(2.0)), (2, 3)),
}


@pytest.mark.parametrize("name", sorted(SHAPE_CASES))
def test_shape_conversions_match_torch(name):
    fn, shape = SHAPE_CASES[name]
    x = torch.randn(shape, generator=torch.Generator().manual_seed(3))
    want = fn(x.clone())
    got = poptorch.inferenceModel(_Call(fn))(x.clone())
    want = want if isinstance(want, tuple) else (want,)
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g, w)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int32])
def test_copy_into_input_keeps_its_dtype(dtype):
    fn = _Call(lambda x, y: y.copy_(x))
    x = torch.randn(2, 3) * 4
    y = torch.zeros(2, 3, dtype=dtype)
    got = poptorch.inferenceModel(fn)(x, y.clone())
    want = fn(x, y.clone())
    assert got.dtype == dtype
    torch.testing.assert_close(got, want)


def test_scalar_input_keeps_rank_zero():
    fn = _Call(lambda a: torch.arange(5) + a)
    a = torch.tensor(0.25)
    torch.testing.assert_close(poptorch.inferenceModel(fn)(a), fn(a))


def test_module_error_is_raised_unchanged():
    """An exception the module's own forward raises (here torch refusing an argument) comes out
    as torch raises it, not wrapped in a capture error."""
    def bad(x):
        raise ValueError("forward refuses this input")

    with pytest.raises(ValueError, match="^forward refuses this input$"):
        poptorch.inferenceModel(_Call(bad))(torch.zeros(2))
    with pytest.raises(TypeError) as native:
        torch.zeros(3).scatter(0, torch.zeros(3, dtype=torch.long), torch.ones(3), "add")
    with pytest.raises(TypeError) as ours:
        poptorch.inferenceModel(_Call(lambda x, i, s: x.scatter(0, i, s, "add")))(
            torch.zeros(3), torch.zeros(3, dtype=torch.long), torch.ones(3))
    assert str(ours.value) == str(native.value)


SETITEM_CASES = {
    "two_tensor_indices_apart": lambda t, i, v: t.__setitem__((i, slice(None), i), v),
    "through_a_slice": lambda t, i, v: t.__setitem__((slice(None), i), v),
    "two_slices_then_index": lambda t, i, v: t.__setitem__((slice(None), slice(None), i), v),
    "adjacent_after_slice": lambda t, i, v: t.__setitem__((slice(None), i, i), v),
}


@pytest.mark.parametrize("name", sorted(SETITEM_CASES))
@pytest.mark.parametrize("index", [[0], [[1, 0]], [[0, 1], [1, 0]]])
def test_advanced_index_assignment_trains_like_torch(name, index):
    """t[key] = v with tensor indices anywhere in the key (which torch's exporter refuses or
    gets wrong), in a trainingModel: outputs and the trained weight match torch."""
    assign = SETITEM_CASES[name]

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(120, 120)

        def forward(self, x, idx, v):
            t = self.lin(x.reshape(-1)).reshape(2, 3, 4, 5)
            assign(t, idx, v)
            return t, (t ** 2).sum()

    torch.manual_seed(0)
    net = Net()
    ref = Net()
    ref.load_state_dict(net.state_dict())
    x = torch.randn(2, 3, 4, 5)
    idx = torch.tensor(index)
    key = {"two_tensor_indices_apart": (idx, slice(None), idx), "through_a_slice": (slice(None), idx),
           "two_slices_then_index": (slice(None), slice(None), idx), "adjacent_after_slice": (slice(None), idx, idx)}
    v = torch.randn(torch.zeros(2, 3, 4, 5)[key[name]].shape)  # the shape the key selects
    opt = torch.optim.SGD(ref.parameters(), lr=0.01)
    want, loss = ref(x, idx, v)
    loss.backward()
    opt.step()
    training = poptorch.trainingModel(net, optimizer=torch.optim.SGD(net.parameters(), lr=0.01))
    got, got_loss = training(x, idx, v)
    torch.testing.assert_close(got, want.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(net.lin.weight, ref.lin.weight, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mask_dims", [1, 3, 4])
def test_boolean_mask_assignment_matches_torch(mask_dims):
    fn = _Call(lambda t, m, v: (t.__setitem__(m, v), t)[1])
    t = torch.randn(2, 3, 4, 5)
    mask = torch.rand([2, 3, 4, 5][:mask_dims], generator=torch.Generator().manual_seed(1)) > 0.5
    v = torch.randn([2, 3, 4, 5][mask_dims:]) if mask_dims < 4 else torch.tensor([7.0])
    torch.testing.assert_close(poptorch.inferenceModel(fn)(t.clone(), mask, v), fn(t.clone(), mask, v))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("lengths_as_tensors", [True, False])
def test_ctc_loss_matches_torch(reduction, lengths_as_tensors):
    """F.ctc_loss through graft's CtcLoss (targets [N, S] padded, none of them the blank)."""
    g = torch.Generator().manual_seed(5)
    T, N, C, S, blank = 8, 3, 5, 4, 2
    log_probs = torch.randn(T, N, C, generator=g).log_softmax(-1)
    targets = torch.randint(0, C - 1, (N, S), generator=g)
    targets[targets >= blank] += 1  # never the blank
    in_len, tgt_len = [T, T - 1, T - 2], [4, 2, 3]
    if lengths_as_tensors:
        in_len, tgt_len = torch.tensor(in_len), torch.tensor(tgt_len)

    fn = _Call(lambda lp, t: F.ctc_loss(lp, t, in_len, tgt_len, blank=blank, reduction=reduction))
    torch.testing.assert_close(poptorch.inferenceModel(fn)(log_probs, targets), fn(log_probs, targets),
                               rtol=1e-5, atol=1e-5)


def test_bitwise_not_and_bool_logic_match_torch():
    x = torch.randint(-50, 50, (6,), dtype=torch.int32, generator=torch.Generator().manual_seed(2))
    fn = _Call(lambda a: (~a, torch.bitwise_not(a), torch.bitwise_and(a > 0, a < 20), (a > 0) ^ (a < 20)))
    for got, want in zip(poptorch.inferenceModel(fn)(x), fn(x)):
        assert got.dtype == want.dtype
        assert torch.equal(got, want)
    with pytest.raises(poptorch.Error, match="opset 18"):
        poptorch.inferenceModel(_Call(lambda a: torch.bitwise_or(a, a)))(x)


@pytest.mark.parametrize("reduce", [None, "add", "multiply"])
@pytest.mark.parametrize("scalar", [True, False])
def test_scatter_with_reduce_matches_torch(reduce, scalar):
    g = torch.Generator().manual_seed(4)
    x = torch.randn(6, 6, generator=g)
    idx = torch.randint(6, (2, 6), generator=g)
    src = 1.5 if scalar else torch.randn(3, 7, generator=g)  # a larger src: only idx's shape of it is read
    kw = {} if reduce is None else {"reduce": reduce}
    fn = _Call(lambda a, i: torch.scatter(a, 1, i, src, **kw))
    torch.testing.assert_close(poptorch.inferenceModel(fn)(x, idx), fn(x, idx))


def test_index_fill_with_a_tensor_value_of_another_dtype():
    fn = _Call(lambda t, i: t.index_fill(1, i, torch.tensor(-1)))
    t, i = torch.randn(2, 4), torch.tensor([0, 2])
    torch.testing.assert_close(poptorch.inferenceModel(fn)(t, i), fn(t, i))
