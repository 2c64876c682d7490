"""Recipes for training frameworks (docs/integrations.md). Each module imports its framework
only when used, so ``import memopt.integrations`` needs none of them.

=================  =========================================================================
module             route
=================  =========================================================================
``hf``             ``Trainer(model=memopt.optimize(model), callbacks=[MemoptCallback()])``
``accelerate``     ``accelerator.prepare(memopt.optimize(model), ...)`` (dynamo backend "no")
``lightning``      ``Trainer(callbacks=[MemoptLightningCallback("model", level=1)])``
``torchtitan``     ``--compile.enable --compile.backend memopt`` + :func:`torchtitan.memopt_env`
=================  =========================================================================
"""
