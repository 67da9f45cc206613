"""A CNN's forward and backward pass on XLA:CPU, called alone and inside ``lax.scan``
(as every training loop runs it), with XLA's convolution (``flax.linen.Conv``) and with
``jaxrl.networks.Conv`` (on CPU: one product of the input's patches), same parameters.

Inside a loop XLA:CPU does not rewrite a convolution into its fast (Eigen / YNNPACK)
form, so the kernel-gradient convolution runs as a naive loop; outside one it does.

    python benchmarks/investigations/conv_in_scan.py               # every case below
    python benchmarks/investigations/conv_in_scan.py minatar-32 nature-32
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxrl import networks

# name: (torso, batch, image): the batch shapes of DQN's (32) and PPO's (the preset's
# minibatch: 8,192 / 8 on MinAtar, 1,024 / 4 on Atari) learners.
CASES = {
    "minatar-32": ("minatar", 32, (10, 10, 4)),
    "minatar-1024": ("minatar", 1024, (10, 10, 4)),
    "nature-32": ("nature", 32, (84, 84, 4)),
    "nature-256": ("nature", 256, (84, 84, 4)),
    "impala-32": ("impala", 32, (84, 84, 4)),
}


def layers(torso: str):
    """(filters, kernel, stride, padding) of each convolution, as jaxrl's torsos have them
    (IMPALA's: its first stack only, pool and residual blocks included below)."""
    return {
        "minatar": [(16, 3, 1, "VALID")],
        "nature": [(32, 8, 4, "VALID"), (64, 4, 2, "VALID"), (64, 3, 1, "VALID")],
        "impala": [(16, 3, 1, "SAME")] * 5,
    }[torso]


class Net(nn.Module):
    torso: str
    conv: Callable  # builds a convolution layer: nn.Conv or networks.Conv

    @nn.compact
    def __call__(self, x):
        for i, (filters, kernel, stride, padding) in enumerate(layers(self.torso)):
            conv = self.conv(filters, (kernel, kernel), (stride, stride), padding=padding)
            y = nn.relu(conv(x))
            if self.torso == "impala" and i == 0:
                y = nn.max_pool(y, (3, 3), strides=(2, 2), padding="SAME")
            x = x + y if self.torso == "impala" and i > 0 else y  # residual, as IMPALA's blocks
        return nn.Dense(6)(nn.relu(nn.Dense(128)(x.reshape(x.shape[0], -1))))


def milliseconds(fn, calls: int) -> float:
    jax.block_until_ready(fn())  # compile
    start = time.perf_counter()
    for _ in range(calls):
        jax.block_until_ready(fn())
    return (time.perf_counter() - start) / calls * 1e3


def measure(torso: str, batch: int, image: tuple, conv: Callable, steps: int) -> tuple[float, float]:
    net = Net(torso, conv)
    x = jax.random.uniform(jax.random.key(0), (batch, *image))
    params = net.init(jax.random.key(1), x)

    def sgd(params, _=None):
        grads = jax.grad(lambda p: jnp.sum(net.apply(p, x) ** 2))(params)
        return jax.tree.map(lambda p, g: p - 1e-6 * g, params, grads), None

    alone = jax.jit(lambda p: sgd(p)[0])
    scanned = jax.jit(lambda p: jax.lax.scan(sgd, p, None, length=steps)[0])
    return milliseconds(lambda: alone(params), steps), milliseconds(lambda: scanned(params), 1) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", nargs="*", help=f"cases (default: all): {', '.join(CASES)}")
    parser.add_argument("--steps", type=int, default=8, help="passes per scan, and calls alone (default: %(default)s)")
    args = parser.parse_args()
    print(f"jax {jax.__version__}, {jax.devices()[0].device_kind}; ms per forward + backward pass and SGD step")
    print("| torso | batch | XLA conv alone | XLA conv in scan | patches alone | patches in scan | XLA / patches |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name in args.cases or CASES:
        torso, batch, image = CASES[name]
        xla = measure(torso, batch, image, functools.partial(nn.Conv, kernel_init=networks.orthogonal()), args.steps)
        patches = measure(torso, batch, image, networks.Conv, args.steps)
        print(
            f"| {torso} {image[0]}x{image[1]}x{image[2]} | {batch} | {xla[0]:.2f} | {xla[1]:.2f} | {patches[0]:.2f} "
            f"| {patches[1]:.2f} | {xla[1] / patches[1]:.1f}x |",
            flush=True,
        )


if __name__ == "__main__":
    main()
