# An inference script written the way PopART's own examples are written; only the import differs.
# It builds a small classifier with the Builder, runs several batches per step on a CPU device,
# and checks the anchors against numpy. Run by tests/python/test_popart_script.py.
import numpy as np
import graft as popart

BATCH = 4
FEATURES = 8
HIDDEN = 16
CLASSES = 3
BATCHES_PER_STEP = 5

np.random.seed(0)
w1_init = np.random.randn(FEATURES, HIDDEN).astype(np.float32) * 0.5
b1_init = np.random.randn(HIDDEN).astype(np.float32) * 0.1
w2_init = np.random.randn(HIDDEN, CLASSES).astype(np.float32) * 0.5
b2_init = np.zeros([CLASSES], np.float32)

# Create a builder and construct a graph
builder = popart.Builder()

data_shape = popart.TensorInfo("FLOAT", [BATCH, FEATURES])
ip = builder.addInputTensor(data_shape, "input")

with builder.nameScope("layer1"):
    w1 = builder.addInitializedInputTensor(w1_init, "weights")
    b1 = builder.addInitializedInputTensor(b1_init, "bias")
    x = builder.aiOnnx.gemm([ip, w1, b1], 1.0, 1.0, False, False)
    x = builder.aiOnnx.relu([x])

with builder.nameScope("layer2"):
    w2 = builder.addInitializedInputTensor(w2_init, "weights")
    b2 = builder.addInitializedInputTensor(b2_init, "bias")
    logits = builder.aiOnnx.matmul([x, w2])
    logits = builder.aiOnnx.add([logits, b2], "logits")

probs = builder.aiOnnx.sigmoid([logits])
gelu = builder.aiGraphcore.gelu([logits])

builder.addOutputTensor(probs)
builder.addOutputTensor(gelu)

proto = builder.getModelProto()

print("Inputs:", builder.getInputTensorIds())
print("Output shape:", builder.getTensorShape(probs))

# Describe how to run the model
dataFlow = popart.DataFlow(BATCHES_PER_STEP, {
    probs: popart.AnchorReturnType("All"),
    gelu: popart.AnchorReturnType("Final"),
    logits: popart.AnchorReturnType("Sum"),
})

opts = popart.SessionOptions()
opts.constantWeights = True
opts.enableStochasticRounding = False  # an IPU option: accepted and ignored

# Create a session to compile and execute the graph
session = popart.InferenceSession(
    fnModel=proto,
    dataFlow=dataFlow,
    userOptions=opts,
    deviceInfo=popart.DeviceManager().createIpuModelDevice({"numIPUs": 1}),
)

# Compile graph
session.prepareDevice()

# Create buffers to receive results from the execution
anchors = session.initAnchorArrays()

# Generate some random input data
data = np.random.rand(BATCHES_PER_STEP, BATCH, FEATURES).astype(np.float32)

stepio = popart.PyStepIO({ip: data}, anchors)
session.weightsFromHost()
session.run(stepio)

print("Probabilities shape:", anchors[probs].shape)
print("Probabilities of the last batch:", anchors[probs][-1])

# Check against numpy.
hidden = np.maximum(data @ w1_init + b1_init, 0)
expect_logits = hidden @ w2_init + b2_init
expect_probs = 1 / (1 + np.exp(-expect_logits))
c = np.sqrt(2 / np.pi)
expect_gelu = 0.5 * expect_logits * (1 + np.tanh(c * (expect_logits + 0.044715 * expect_logits ** 3)))
assert anchors[probs].shape == (BATCHES_PER_STEP, BATCH, CLASSES)
assert anchors[gelu].shape == (BATCH, CLASSES)
assert anchors[logits].shape == (BATCH, CLASSES)
np.testing.assert_allclose(anchors[probs], expect_probs, rtol=1e-5, atol=1e-6)
np.testing.assert_allclose(anchors[gelu], expect_gelu[-1], rtol=1e-5, atol=1e-6)
np.testing.assert_allclose(anchors[logits], expect_logits.sum(axis=0), rtol=1e-4, atol=1e-5)
print("popart-style inference: OK")
