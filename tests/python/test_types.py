"""The Python API carries every ONNX value type: bfloat16, float8, int4/uint4 and int2/uint2 arrays through
ml_dtypes; string tensors as numpy str/object arrays; sequences as lists and absent optionals as
None; anchors whose shape only the run decides (NonZero, Unique, symbolic dimensions) come back as
arrays of the right shape, while PopART's fixed anchors keep their arrays."""
import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper

import graft

OPSET = [helper.make_opsetid("", 20)]


def model_bytes(nodes, inputs, outputs, initializers=(), opset=OPSET, ir_version=10):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(g, opset_imports=opset, ir_version=ir_version).SerializeToString()


def session(model, anchors, batches_per_step=1, shapes=None, art="All"):
    flow = graft.DataFlow(batches_per_step, {a: graft.AnchorReturnType(art) for a in anchors})
    s = graft.InferenceSession(model, flow, graft.DeviceManager().createCpuDevice(), inputShapeInfo=shapes)
    s.prepareDevice()
    return s


def run(model, inputs, anchors, **kwargs):
    s = session(model, anchors, **kwargs)
    out = s.initAnchorArrays()
    s.run(graft.PyStepIO(inputs, out))
    return out


def tensor(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


# ---- ml_dtypes: bfloat16, float8, int4 ------------------------------------------------------------

LOW_PRECISION = [
    (TensorProto.BFLOAT16, ml_dtypes.bfloat16),
    (TensorProto.FLOAT8E4M3FN, ml_dtypes.float8_e4m3fn),
    (TensorProto.FLOAT8E4M3FNUZ, ml_dtypes.float8_e4m3fnuz),
    (TensorProto.FLOAT8E5M2, ml_dtypes.float8_e5m2),
    (TensorProto.FLOAT8E5M2FNUZ, ml_dtypes.float8_e5m2fnuz),
    (TensorProto.INT4, ml_dtypes.int4),
    (TensorProto.UINT4, ml_dtypes.uint4),
    (TensorProto.INT2, ml_dtypes.int2),
    (TensorProto.UINT2, ml_dtypes.uint2),
    (TensorProto.FLOAT8E8M0, ml_dtypes.float8_e8m0fnu),
]


@pytest.mark.parametrize("onnx_type,np_type", LOW_PRECISION, ids=lambda v: getattr(v, "__name__", str(v)))
def test_low_precision_arrays_in_and_out(onnx_type, np_type):
    # x (the low-precision type) -> Identity -> y (same type), and Cast(x) -> FLOAT; FLOAT -> Cast
    # -> the low-precision type.
    nodes = [helper.make_node("Identity", ["x"], ["y"]), helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["f"], ["fq"], to=onnx_type)]
    model = model_bytes(nodes, [tensor("x", onnx_type, [2, 3]), tensor("f", TensorProto.FLOAT, [2, 3])],
                        [tensor("y", onnx_type, [2, 3]), tensor("xf", TensorProto.FLOAT, [2, 3]),
                         tensor("fq", onnx_type, [2, 3])])
    integer = np_type in (ml_dtypes.int4, ml_dtypes.uint4)
    base = np.array([[0, 1, 2], [3, 4, 5]], np.float32) if integer else np.array(
        [[0.5, -1.25, 3.0], [0.1, 7.0, -0.3]], np.float32)
    if np_type in (ml_dtypes.int2, ml_dtypes.uint2):
        base = np.array([[0, 1, 1], [0, 1, 0]], np.float32)
    if np_type is ml_dtypes.float8_e8m0fnu:  # powers of two only, no sign
        base = np.array([[0.5, 1.0, 4.0], [0.125, 8.0, 2.0]], np.float32)
    if np_type is ml_dtypes.float8_e4m3fnuz or np_type is ml_dtypes.float8_e5m2fnuz or np_type is ml_dtypes.uint4:
        base = np.abs(base)
    x = base.astype(np_type)
    s = session(model, ["y", "xf", "fq"])
    assert s.anchorDtype("y") == np.dtype(np_type)
    out = s.initAnchorArrays()
    assert out["y"].dtype == np.dtype(np_type) and out["fq"].dtype == np.dtype(np_type)
    s.run(graft.PyStepIO({"x": x, "f": base}, out))
    np.testing.assert_array_equal(out["y"].view(np.uint8), x.view(np.uint8))
    np.testing.assert_array_equal(out["xf"], x.astype(np.float32))
    np.testing.assert_array_equal(out["fq"].astype(np.float32), base.astype(np_type).astype(np.float32))


def test_bfloat16_initializer_through_the_builder():
    b = graft.Builder()
    w = np.array([1.5, -2.0, 0.25], ml_dtypes.bfloat16)
    wid = b.addInitializedInputTensor(w, "w")
    y = b.aiOnnxOpset20.cast([wid], "FLOAT")
    b.addOutputTensor(y)
    out = run(b.getModelProto(), {}, [y])
    np.testing.assert_array_equal(out[y], w.astype(np.float32))


def test_unknown_numpy_dtype_is_named():
    model = model_bytes([helper.make_node("Identity", ["x"], ["y"])], [tensor("x", TensorProto.FLOAT, [2])],
                        [tensor("y", TensorProto.FLOAT, [2])])
    s = session(model, ["y"])
    with pytest.raises(graft.Error, match="datetime64"):
        s.run(graft.PyStepIO({"x": np.zeros(2, "datetime64[s]")}, s.initAnchorArrays()))


# ---- strings ---------------------------------------------------------------------------------------


def test_string_tensors_as_numpy_str_and_object_arrays():
    nodes = [helper.make_node("StringConcat", ["a", "b"], ["ab"]), helper.make_node("Identity", ["a"], ["a2"])]
    model = model_bytes(nodes, [tensor("a", TensorProto.STRING, [2, 2]), tensor("b", TensorProto.STRING, [2, 2])],
                        [tensor("ab", TensorProto.STRING, [2, 2]), tensor("a2", TensorProto.STRING, [2, 2])])
    a = np.array([["x", "yy"], ["héllo", ""]])                       # numpy str ('<U5')
    b = np.array([["1", "2"], ["3", "four"]], dtype=object)          # object array of str
    s = session(model, ["ab", "a2"])
    out = s.initAnchorArrays()
    assert out["ab"].dtype == object and out["ab"].shape == (2, 2)
    s.run(graft.PyStepIO({"a": a, "b": b}, out))
    assert out["ab"].tolist() == [["x1", "yy2"], ["héllo3", "four"]]
    assert out["a2"].tolist() == a.tolist()
    with pytest.raises(graft.Error, match="element 1 of the string array is a int"):
        s.run(graft.PyStepIO({"a": np.array(["x", 3, "z", "w"], dtype=object).reshape(2, 2), "b": b},
                             s.initAnchorArrays()))


def test_string_anchor_with_several_batches_per_step():
    model = model_bytes([helper.make_node("Identity", ["a"], ["y"])], [tensor("a", TensorProto.STRING, [3])],
                        [tensor("y", TensorProto.STRING, [3])])
    s = session(model, ["y"], batches_per_step=2)
    out = s.initAnchorArrays()
    assert out["y"].shape == (2, 3)
    a = np.array([["a", "b", "c"], ["d", "e", "f"]])
    s.run(graft.PyStepIO({"a": a}, out))
    assert out["y"].tolist() == a.tolist()


# ---- sequences and optionals --------------------------------------------------------------------------


def seq(name, elem, shape):
    return helper.make_tensor_sequence_value_info(name, elem, shape)


def test_sequence_input_and_output_as_lists():
    # seq -> ConcatFromSequence (axis 0) -> cat; seq -> SequenceInsert(seq, extra) -> longer
    nodes = [helper.make_node("ConcatFromSequence", ["s"], ["cat"], axis=0),
             helper.make_node("SequenceInsert", ["s", "extra"], ["longer"])]
    model = model_bytes(nodes, [seq("s", TensorProto.FLOAT, ["n", 3]), tensor("extra", TensorProto.FLOAT, [1, 3])],
                        [tensor("cat", TensorProto.FLOAT, ["m", 3]), seq("longer", TensorProto.FLOAT, None)])
    items = [np.arange(6, dtype=np.float32).reshape(2, 3), np.ones((1, 3), np.float32)]
    extra = np.full((1, 3), 7, np.float32)
    s = session(model, ["cat", "longer"])
    out = s.initAnchorArrays()
    assert out == {"cat": None, "longer": None}  # shapes and lengths come with the run
    s.run(graft.PyStepIO({"s": items, "extra": extra}, out))
    np.testing.assert_array_equal(out["cat"], np.concatenate(items))
    assert isinstance(out["longer"], list) and len(out["longer"]) == 3
    for got, want in zip(out["longer"], items + [extra]):
        np.testing.assert_array_equal(got, want)
    # Elements of the wrong type are named.
    with pytest.raises(graft.Error, match="sequence element 0"):
        s.run(graft.PyStepIO({"s": [np.zeros((1, 3), np.int64)], "extra": extra}, s.initAnchorArrays()))
    with pytest.raises(graft.Error, match="'s'"):
        s.run(graft.PyStepIO({"s": items[0], "extra": extra}, s.initAnchorArrays()))


def test_sequence_input_per_model_run():
    model = model_bytes([helper.make_node("SequenceLength", ["s"], ["n"])], [seq("s", TensorProto.FLOAT, [2])],
                        [tensor("n", TensorProto.INT64, [])])
    s = session(model, ["n"], batches_per_step=3)
    out = s.initAnchorArrays()
    assert out["n"].shape == (3,)  # a fixed anchor
    per_run = [[np.zeros(2, np.float32)] * k for k in (1, 4, 2)]
    s.run(graft.PyStepIO({"s": per_run}, out))
    np.testing.assert_array_equal(out["n"], [1, 4, 2])


def test_optional_input_and_output_as_none():
    opt_t = helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [2]))
    nodes = [helper.make_node("OptionalHasElement", ["o"], ["has"]), helper.make_node("Identity", ["o"], ["same"])]
    model = model_bytes(nodes, [helper.make_value_info("o", opt_t)],
                        [tensor("has", TensorProto.BOOL, []), helper.make_value_info("same", opt_t)])
    s = session(model, ["has", "same"])
    out = s.initAnchorArrays()
    assert out["same"] is None and out["has"].shape == ()
    s.run(graft.PyStepIO({"o": None}, out))
    assert not out["has"] and out["same"] is None
    out = s.initAnchorArrays()
    s.run(graft.PyStepIO({"o": np.array([1.0, 2.0], np.float32)}, out))
    assert out["has"]
    np.testing.assert_array_equal(out["same"], [1.0, 2.0])
    # Only an optional input may be None.
    m2 = model_bytes([helper.make_node("Identity", ["x"], ["y"])], [tensor("x", TensorProto.FLOAT, [2])],
                     [tensor("y", TensorProto.FLOAT, [2])])
    s2 = session(m2, ["y"])
    with pytest.raises(graft.Error, match="'x'"):
        s2.run(graft.PyStepIO({"x": None}, s2.initAnchorArrays()))


# ---- anchors whose shape the data decides ----------------------------------------------------------


def nonzero_model():
    nodes = [helper.make_node("NonZero", ["x"], ["nz"]), helper.make_node("Unique", ["x"], ["u"], sorted=1),
             helper.make_node("Relu", ["x"], ["r"])]
    return model_bytes(nodes, [tensor("x", TensorProto.FLOAT, [2, 3])],
                       [tensor("nz", TensorProto.INT64, [2, None]), tensor("u", TensorProto.FLOAT, [None]),
                        tensor("r", TensorProto.FLOAT, [2, 3])])


def test_data_dependent_anchors_return_arrays_of_their_shape():
    x = np.array([[0, 2, 0], [3, 2, 0]], np.float32)
    s = session(nonzero_model(), ["nz", "u", "r"])
    assert s.anchorIsFixed("r") and not s.anchorIsFixed("nz") and not s.anchorIsFixed("u")
    out = s.initAnchorArrays()
    assert out["nz"] is None and out["u"] is None
    assert out["r"].shape == (2, 3)  # PopART's fixed anchor, written in place
    fixed = out["r"]
    s.run(graft.PyStepIO({"x": x}, out))
    np.testing.assert_array_equal(out["nz"], np.array(np.nonzero(x)))
    np.testing.assert_array_equal(out["u"], np.unique(x))
    assert out["r"] is fixed
    np.testing.assert_array_equal(fixed, np.maximum(x, 0))


def test_data_dependent_anchors_over_several_batches():
    s = session(nonzero_model(), ["nz", "u"], batches_per_step=2)
    same = np.array([[[1, 0, 0], [0, 0, 1]], [[0, 1, 0], [1, 0, 0]]], np.float32)   # 2 non-zeros in each
    out = s.initAnchorArrays()
    s.run(graft.PyStepIO({"x": same}, out))
    assert out["nz"].shape == (2, 2, 2)  # equal shapes: stacked, [batchesPerStep, ...]
    for i in range(2):
        np.testing.assert_array_equal(out["nz"][i], np.array(np.nonzero(same[i])))
    differ = np.array([[[1, 0, 0], [0, 0, 0]], [[1, 1, 1], [1, 1, 0]]], np.float32)
    out = s.initAnchorArrays()
    s.run(graft.PyStepIO({"x": differ}, out))
    assert isinstance(out["nz"], list) and [a.shape for a in out["nz"]] == [(2, 1), (2, 5)]
    for i in range(2):
        np.testing.assert_array_equal(out["nz"][i], np.array(np.nonzero(differ[i])))


def test_sum_of_a_data_dependent_anchor_is_refused():
    s = session(nonzero_model(), ["nz"], art="Sum")
    with pytest.raises(graft.Error, match="anchor 'nz' has AnchorReturnType Sum"):
        s.run(graft.PyStepIO({"x": np.ones((2, 3), np.float32)}, s.initAnchorArrays()))


def test_a_given_array_for_a_data_dependent_anchor():
    # A caller who knows the shape may pass an array; one that does not fit is refused by name.
    s = session(nonzero_model(), ["nz"])
    out = {"nz": np.zeros((2, 6), np.int64)}
    s.run(graft.PyStepIO({"x": np.ones((2, 3), np.float32)}, out))
    np.testing.assert_array_equal(out["nz"], np.array(np.nonzero(np.ones((2, 3)))))
    with pytest.raises(graft.Error, match="anchor array 'nz' has shape"):
        s.run(graft.PyStepIO({"x": np.ones((2, 3), np.float32)}, {"nz": np.zeros((2, 4), np.int64)}))
