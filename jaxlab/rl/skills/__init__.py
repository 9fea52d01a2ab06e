"""jaxlab.rl.skills: unsupervised skill discovery, METRA and contrastive successor features (CSF).

* ``training``: the shared acting/replay loop of skill-conditioned agents (skills on the unit
  sphere, one per trajectory), ``SkillConfig``, ``SkillOptim``, ``SkillState``, ``make_train``;
* ``metra``: METRA's representation objective with the temporal-distance constraint (dual
  descent on lambda), reward ``(phi(s') - phi(s))^T z``, SAC;
* ``csf``: CSF's contrastive objective, information-bottleneck reward, successor-feature critics;
* ``evaluate``: state coverage, zero-shot goal reaching, the skills PNG.

The ``metra`` and ``csf`` recipes (``jaxlab.recipes.skills``) wire these into the shared loop.
"""
