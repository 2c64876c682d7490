"""``memopt plan`` and ``memopt fit``: plan training memory without a GPU.

The model is built on the meta device, traced with fake tensors through the same compile path
as :func:`memopt.optimize` (dynamo, AOTAutograd, Inductor's partitioner hook, memopt's pass
pipeline; no code generation) and the predicted peak of a training step is solved for sizes.

=================  ==========================================================
module             role
=================  ==========================================================
``main``           argument parsing, output, errors -> exit codes
``models``         ``hf:TYPE`` and ``package.module:factory`` model sources
``trace``          fake tracing; runs memopt's pipeline per config
``attention``      the attention kernel a GPU would pick, for CPU-only tracing
``liveness``       live bytes of the partitioned step (FX -> sympy)
``extrapolate``    symbol renaming, re-evaluation, depth extrapolation
``peak``           the peak model (parameters, gradients, optimizer, activations)
``analyze``        trace decisions and orchestration
``fit``            largest batch / sequence length that fits
=================  ==========================================================

See docs/cli.md.
"""
