"""Graphs several test files share, built by capturing real dualgraph programs."""
import numpy as np

import dualgraph as dg


def training_step():
    """A captured MLP training step (forward, cross-entropy plus an L2 penalty on
    the first weight, backward, SGD with momentum): its graph and the arguments of that
    graph for one batch."""
    dg.manual_seed(0)
    nn, F = dg.nn, dg.nn.functional
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 4))
    opt = dg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    @dg.compile
    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y) + 1e-3 * (model[0].weight * model[0].weight).sum()
        loss.backward()
        opt.step()
        return loss

    x, y = dg.randn(8, 6), dg.tensor(np.array([0, 1, 2, 3, 0, 1, 2, 3]))
    step(x, y)
    step(x, y)   # the second call captures the momentum buffers too
    return step.graph, step._last.inputs([x, y])
