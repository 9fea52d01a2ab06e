"""jaxlab.rl.search: D-TSN (differentiable tree search from demonstrations) and its baselines.

* ``dtsn``: the array tree, the best-first search (``search``, ``search_batch``), the max backup
  and the learning rule (``dtsn_loss``: root-Q cross-entropy, latent/reward consistency,
  REINFORCE with the telescoping baseline);
* ``models``: the maze latent world model, the Game of 24 known model with a learned value, and
  the BC networks on the same encoders;
* ``bc``: the behaviour-cloning loss;
* ``training``: demonstrations -> train state -> steps -> held-out evaluation (``make_train`` is
  one pure function of a key, vmappable over seeds);
* ``render``: the expanded cells of a maze search, as a GIF.
"""
