"""jaxlab.diffusion: schedules, ODE samplers, LD3 learned discretisation, preference fine-tuning.

Modules (import what you use; nothing heavy is imported here):

- ``schedules``: VP (linear, cosine, discrete), VE and EDM schedules; step-selection baselines.
- ``model_wrapper``: noise/data/v/score networks and guidance -> the samplers' ``eps_fn``.
- ``samplers``: Euler, Heun, DDIM, DPM-Solver++ (2M/3M), UniPC (bh1/bh2), iPNDM as ``lax.scan``.
- ``gmm``: exact Gaussian-mixture denoiser (the oracle model of the tests) and tilting.
- ``sliced_wasserstein``: the sliced Wasserstein distance.
- ``ld3``: LD3 (teacher pairs, softmax-cumsum steps, hard/soft loss, validation, patience).
- ``preference``: Diffusion-DPO, DSPO and SFT losses.
- ``losses``, ``precond``: DSM (noise prediction), x_0-prediction and EDM training; EDM preconditioning.
- ``guidance``: classifier guidance by an energy of the x_0-estimate inside a time window.
- ``planner``, ``planner_energies``: Diffusion Planner (joint prediction and planning, DiT over
  agents, pinned current state, guidance energies for collision, drivable area, speed, comfort).
- ``mlp_denoiser``, ``unet``, ``dit``, ``time_embedding``, ``init``: networks.
- ``datasets``, ``images``: sklearn digits; PNG grids and scatter plots.
"""
