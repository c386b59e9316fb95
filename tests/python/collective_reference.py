"""The collective ops (builder.aiGraphcore.replicated*, docs/replication.md) in numpy, with PopART's
CommGroups, and a model that trains through all three of them with the gradient numpy gives
directly: shared by test_replication_ops.py (replicas in one process) and test_distributed.py
(replicas across processes, run by distributed_train.py)."""
import numpy as np

import graft
from test_replication import IN

B, N = 2, 3  # each replica's x is [B, IN]; the layers map IN -> N
LR = 0.1


def members(kind, size, replicas, replica):
    """The replicas of `replica`'s group, in the group's order (a replica's place is its shard)."""
    if kind == "All":
        return list(range(replicas))
    if kind == "Ungrouped":
        return [replica]
    assert replicas % size == 0, (kind, size, replicas)
    if kind == "Consecutive":
        first = replica // size * size
        return list(range(first, first + size))
    groups = replicas // size  # Orthogonal: {i, i + groups, i + 2 groups, ...}
    return [replica % groups + i * groups for i in range(size)]


def comm_group(kind, size):
    return graft.CommGroup(getattr(graft.CommGroupType, kind), size)


def operator(name):
    return getattr(graft.CollectiveOperator, name)


def allreduce(xs, group, op="Add"):
    out = []
    for r in range(len(xs)):
        g = members(*group, len(xs), r)
        s = sum(xs[m] for m in g)
        out.append(s / len(g) if op == "Mean" else s)
    return np.stack(out)


def allgather(xs, group):
    return np.stack([np.concatenate([xs[m].reshape(-1) for m in members(*group, len(xs), r)]) for r in range(len(xs))])


def reducescatter(xs, group, op="Add"):
    out = []
    for r in range(len(xs)):
        g = members(*group, len(xs), r)
        k, n = len(g), xs[r].size
        full = sum(xs[m].reshape(-1) for m in g)
        shard = -(-n // k)
        padded = np.zeros(k * shard, xs.dtype)
        padded[:n] = full / k if op == "Mean" else full
        p = g.index(r)
        out.append(padded[p * shard:(p + 1) * shard])
    return np.stack(out)


def training_model(replicas, reduce_group, gather_group, scatter_group, scatter_op, seed=0):
    """Replica r: loss_r = sum(allreduce(x_r w) c_r) + sum(z_r z_r) + sum(reducescatter(x_r u) d_r) with
    z_r = allgather(x_r v), each collective over its group; the session sums the replicas' weight
    gradients (Sum reduction), so one SGD step trains L = sum_r loss_r. Returns the model, its
    inputs (x, c, d), weights (w, v, u) and loss, and the initial weights."""
    rng = np.random.default_rng(seed)
    init = [rng.standard_normal((IN, N)).astype(np.float32) for _ in range(3)]
    k = len(members(*scatter_group, replicas, 0))
    b = graft.Builder()
    x = b.addInputTensor(graft.TensorInfo("FLOAT", [B, IN]), "x")
    c = b.addInputTensor(graft.TensorInfo("FLOAT", [B, N]), "c")
    d = b.addInputTensor(graft.TensorInfo("FLOAT", [-(-B * N // k)]), "d")
    w, v, u = (b.addInitializedInputTensor(a, name) for a, name in zip(init, "wvu"))
    y = b.aiGraphcore.replicatedallreduce([b.aiOnnx.matmul([x, w])], operator("Add"), comm_group(*reduce_group))
    z = b.aiGraphcore.replicatedallgather([b.aiOnnx.matmul([x, v])], comm_group(*gather_group))
    q = b.aiGraphcore.replicatedreducescatter([b.aiOnnx.matmul([x, u])], operator(scatter_op), comm_group(*scatter_group))
    total = b.aiOnnx.add([b.aiOnnx.add([b.aiOnnx.reducesum([b.aiOnnx.mul([y, c])], keepdims=0),
                                        b.aiOnnx.reducesum([b.aiOnnx.mul([z, z])], keepdims=0)]),
                          b.aiOnnx.reducesum([b.aiOnnx.mul([q, d])], keepdims=0)])
    loss = b.aiGraphcore.identityloss([total], reduction=graft.ReductionType.Sum)
    return b.getModelProto(), (x, c, d), (w, v, u), loss, init


def training_data(replicas, scatter_group, seed=1):
    rng = np.random.default_rng(seed)
    k = len(members(*scatter_group, replicas, 0))
    return (rng.standard_normal((replicas, B, IN)).astype(np.float32),
            rng.standard_normal((replicas, B, N)).astype(np.float32),
            rng.standard_normal((replicas, -(-B * N // k))).astype(np.float32))


def trained_weights(init, xs, cs, ds, reduce_group, gather_group, scatter_group, scatter_op):
    """The weights after one SGD step (LR) on L = sum_r loss_r (training_model), in float64."""
    w0, v0, u0 = (a.astype(np.float64) for a in init)
    xs, cs, ds = (a.astype(np.float64) for a in (xs, cs, ds))
    R = len(xs)
    # y_r sums x_s w over r's group: d(x_s w) = the sum of c_r over s's group.
    gw = sum(xs[s].T @ sum(cs[r] for r in members(*reduce_group, R, s)) for s in range(R))
    # x_s v appears in the z of every member of s's group (k of them), squared.
    k = len(members(*gather_group, R, 0))
    gv = sum(xs[s].T @ (2 * k * (xs[s] @ v0)) for s in range(R))
    # x_s u reaches the shard of every member r of s's group through d_r, in the group's order.
    gu = 0
    for s in range(R):
        g = members(*scatter_group, R, s)
        flat = np.concatenate([ds[r] for r in g])[:B * N]
        if scatter_op == "Mean":
            flat = flat / len(g)
        gu = gu + xs[s].T @ flat.reshape(B, N)
    return w0 - LR * gw, v0 - LR * gv, u0 - LR * gu
