# A training script written the way PopART's own training examples are written; only the import
# differs. It trains a small classifier on synthetic data with the Builder, aiGraphcore.nllloss,
# popart.SGD and a TrainingSession (several batches per step, a learning-rate change without
# recompiling), reads the trained weights back, saves the model and checks it with an
# InferenceSession; then fits a regression with ConstSGD and aiGraphcore.identityloss.
# Run by tests/python/test_popart_script.py.
import os
import tempfile

import numpy as np
import graft as popart

BATCH_SIZE = 16
FEATURES = 8
HIDDEN = 32
CLASSES = 3
BATCHES_PER_STEP = 4
EPOCHS = 12

np.random.seed(42)

# Synthetic data set: three Gaussian blobs.
centres = np.random.randn(CLASSES, FEATURES).astype(np.float32) * 1.2


def make_dataset(n):
    labels = np.random.randint(0, CLASSES, n).astype(np.int32)
    data = centres[labels] + np.random.randn(n, FEATURES).astype(np.float32)
    return data, labels


train_data, train_labels = make_dataset(BATCH_SIZE * BATCHES_PER_STEP * 8)
test_data, test_labels = make_dataset(BATCH_SIZE * BATCHES_PER_STEP)

# ---- the model -----------------------------------------------------------------------------------
builder = popart.Builder()

input_shape = popart.TensorInfo("FLOAT", [BATCH_SIZE, FEATURES])
label_shape = popart.TensorInfo("INT32", [BATCH_SIZE])
ip = builder.addInputTensor(input_shape, "input")
lb = builder.addInputTensor(label_shape, "label")

with builder.nameScope("fc1"):
    w1 = builder.addInitializedInputTensor(
        (np.random.randn(FEATURES, HIDDEN) * np.sqrt(2.0 / FEATURES)).astype(np.float32), "weights")
    b1 = builder.addInitializedInputTensor(np.zeros([HIDDEN], np.float32), "bias")
    x = builder.aiOnnx.gemm([ip, w1, b1])
    x = builder.aiOnnx.relu([x])

with builder.nameScope("fc2"):
    w2 = builder.addInitializedInputTensor(
        (np.random.randn(HIDDEN, CLASSES) * np.sqrt(1.0 / HIDDEN)).astype(np.float32), "weights")
    b2 = builder.addInitializedInputTensor(np.zeros([CLASSES], np.float32), "bias")
    logits = builder.aiOnnx.add([builder.aiOnnx.matmul([x, w2]), b2], "logits")

probs = builder.aiOnnx.softmax([logits], axis=1)
loss = builder.aiGraphcore.nllloss([probs, lb], popart.ReductionType.Mean, debugContext="nllLossVal")

builder.addOutputTensor(probs)
proto = builder.getModelProto()

print("Trainable weights:", builder.getTrainableTensorIds())

# ---- the session ---------------------------------------------------------------------------------
dataFlow = popart.DataFlow(BATCHES_PER_STEP, {
    loss: popart.AnchorReturnType("ALL"),
    probs: popart.AnchorReturnType("FINAL"),
    popart.reservedGradientPrefix() + w2: popart.AnchorReturnType("FINAL"),
})

optimizer = popart.SGD({
    "defaultLearningRate": (0.05, False),
    "defaultMomentum": (0.9, True),
    "defaultWeightDecay": (1e-4, True),
})

opts = popart.SessionOptions()
opts.enableOutlining = False  # an IPU option: accepted and ignored

device = popart.DeviceManager().createCpuDevice()

session = popart.TrainingSession(fnModel=proto,
                                 dataFlow=dataFlow,
                                 loss=loss,
                                 optimizer=optimizer,
                                 deviceInfo=device,
                                 userOptions=opts)

session.prepareDevice()
session.weightsFromHost()

anchors = session.initAnchorArrays()
print("Loss anchor shape:", anchors[loss].shape)

samples_per_step = BATCH_SIZE * BATCHES_PER_STEP
steps_per_epoch = len(train_data) // samples_per_step
epoch_losses = []
for epoch in range(EPOCHS):
    if epoch == EPOCHS // 2:
        # Decay the learning rate: a non-constant hyper-parameter changes without recompiling.
        session.updateOptimizerFromHost(popart.SGD({
            "defaultLearningRate": (0.01, False),
            "defaultMomentum": (0.9, True),
            "defaultWeightDecay": (1e-4, True),
        }))
    losses = []
    for i in range(steps_per_epoch):
        s = slice(i * samples_per_step, (i + 1) * samples_per_step)
        stepio = popart.PyStepIO({
            ip: train_data[s].reshape(BATCHES_PER_STEP, BATCH_SIZE, FEATURES),
            lb: train_labels[s].reshape(BATCHES_PER_STEP, BATCH_SIZE),
        }, anchors)
        session.run(stepio)
        losses.append(np.mean(anchors[loss]))
    epoch_losses.append(float(np.mean(losses)))
    print(f"Epoch {epoch}: loss {epoch_losses[-1]:.4f}")

assert epoch_losses[-1] < 0.5 * epoch_losses[0], epoch_losses
assert anchors[popart.reservedGradientPrefix() + w2].shape == (HIDDEN, CLASSES)

# ---- weights back to the host --------------------------------------------------------------------
session.weightsToHost()
weights = {w1: np.zeros([FEATURES, HIDDEN], np.float32), b1: np.zeros([HIDDEN], np.float32),
           w2: np.zeros([HIDDEN, CLASSES], np.float32), b2: np.zeros([CLASSES], np.float32)}
session.readWeights(popart.PyWeightsIO(weights))


def numpy_forward(data):
    h = np.maximum(data @ weights[w1] + weights[b1], 0)
    z = h @ weights[w2] + weights[b2]
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


accuracy = np.mean(np.argmax(numpy_forward(test_data), axis=1) == test_labels)
print(f"Test accuracy (numpy, trained weights): {accuracy:.3f}")
assert accuracy > 0.9, accuracy

# ---- save and run the trained model for inference ------------------------------------------------
with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "trained.onnx")
    session.modelToHost(path)
    inference = popart.InferenceSession(fnModel=path,
                                        dataFlow=popart.DataFlow(BATCHES_PER_STEP, {probs: popart.AnchorReturnType("ALL")}),
                                        deviceInfo=popart.DeviceManager().createCpuDevice())
    inference.prepareDevice()
    inf_anchors = inference.initAnchorArrays()
    inference.run(popart.PyStepIO({
        ip: test_data.reshape(BATCHES_PER_STEP, BATCH_SIZE, FEATURES),
        lb: test_labels.reshape(BATCHES_PER_STEP, BATCH_SIZE),
    }, inf_anchors))
    np.testing.assert_allclose(inf_anchors[probs].reshape(-1, CLASSES), numpy_forward(test_data), rtol=1e-4,
                               atol=1e-6)

# ---- a regression with ConstSGD and identityloss -------------------------------------------------
true_w = np.random.randn(FEATURES, 1).astype(np.float32)
builder = popart.Builder()
x = builder.addInputTensor(popart.TensorInfo("FLOAT", [BATCH_SIZE, FEATURES]), "x")
y = builder.addInputTensor(popart.TensorInfo("FLOAT", [BATCH_SIZE, 1]), "y")
w = builder.addInitializedInputTensor(np.zeros([FEATURES, 1], np.float32), "w")
err = builder.aiOnnx.sub([builder.aiOnnx.matmul([x, w]), y])
sq_loss = builder.aiGraphcore.identityloss([builder.aiOnnx.mul([err, err])], popart.ReductionType.Mean)

session = popart.TrainingSession(fnModel=builder.getModelProto(),
                                 dataFlow=popart.DataFlow(1, {sq_loss: popart.AnchorReturnType("ALL")}),
                                 loss=sq_loss,
                                 optimizer=popart.ConstSGD(0.1),
                                 deviceInfo=popart.DeviceManager().createCpuDevice())
session.prepareDevice()
session.weightsFromHost()
anchors = session.initAnchorArrays()
for step in range(100):
    xs = np.random.randn(BATCH_SIZE, FEATURES).astype(np.float32)
    session.run(popart.PyStepIO({x: xs, y: xs @ true_w}, anchors))
fitted = {w: np.zeros([FEATURES, 1], np.float32)}
session.weightsToHost()
session.readWeights(popart.PyWeightsIO(fitted))
print(f"Regression: final loss {float(anchors[sq_loss]):.2e}, weight error {np.abs(fitted[w] - true_w).max():.2e}")
assert np.abs(fitted[w] - true_w).max() < 1e-3

print("popart-style training: OK")
