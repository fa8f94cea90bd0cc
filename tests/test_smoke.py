import numpy as np

import luminal as lm


def test_public_api_example_runs():
    """The example of ARCHITECTURE.md §2, verbatim in spirit."""
    cx = lm.Graph()
    a = cx.tensor((2, 3))
    w = cx.tensor((3, 4)).set(np.ones((3, 4), np.float32))
    y = (a @ w + 1.0).relu().retrieve()
    data = np.random.default_rng(0).random((2, 3)).astype(np.float32)
    a.set(data)
    cx.execute()
    expected = np.maximum(data @ np.ones((3, 4), np.float32) + 1.0, 0)
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-5)
    assert y.numpy().shape == (2, 4)
