"""A PopTorch training script, unchanged but for its import (docs/torch.md shows it).

It trains a small classifier with PopTorch's Options, DataLoader, trainingModel and optim, then
evaluates it with an inferenceModel of the same module, and checks against plain PyTorch.
"""
import copy

import torch

import graft.torch as poptorch  # was: import poptorch


class Classifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 3))
        self.loss = torch.nn.CrossEntropyLoss()

    def forward(self, x, labels=None):
        out = self.net(x)
        if labels is None:
            return out
        return out, self.loss(out, labels)


torch.manual_seed(0)
features = torch.randn(256, 8)
labels = (features[:, 0] > 0).long() + (features[:, 1] > 0.5).long()
dataset = torch.utils.data.TensorDataset(features, labels)

model = Classifier()
reference = copy.deepcopy(model)

opts = poptorch.Options()
opts.deviceIterations(4)
opts.Training.gradientAccumulation(2)
opts.randomSeed(42)
loader = poptorch.DataLoader(opts, dataset, batch_size=8, shuffle=False, num_workers=2)

optimizer = poptorch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, loss_scaling=1.0)
training_model = poptorch.trainingModel(model, options=opts, optimizer=optimizer)

for epoch in range(3):
    for x, y in loader:  # 8 x 4 x 2 = 64 samples per call
        _, loss = training_model(x, y)
    print(f"epoch {epoch}: loss {float(loss):.4f}")
training_model.detachFromDevice()

# The same steps in plain PyTorch: each optimizer step sees 2 micro-batches of 8, their gradients
# averaged (PopTorch's default accumulation reduction is Mean).
ref_opt = torch.optim.SGD(reference.parameters(), lr=0.05, momentum=0.9)
for epoch in range(3):
    for x, y in torch.utils.data.DataLoader(dataset, batch_size=16):
        ref_opt.zero_grad()
        _, ref_loss = reference(x, y)
        ref_loss.backward()
        ref_opt.step()

inference_model = poptorch.inferenceModel(model.eval())
accuracy = (inference_model(features).argmax(dim=1) == labels).float().mean().item()
print(f"accuracy {accuracy:.3f}")
with torch.no_grad():
    for name, p in reference.state_dict().items():
        assert torch.allclose(model.state_dict()[name], p, atol=1e-5), name
    assert torch.allclose(inference_model(features), reference.eval()(features), atol=1e-5)
print("poptorch-style training: OK")
