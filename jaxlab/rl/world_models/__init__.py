"""World models: a DreamerV3-style RSSM agent (``dreamer``, composed of ``agent``,
``world_model``, ``actor_critic``, ``affordance_learning``, ``iteration`` and ``evaluate``) and
LS-Imagine's long short-term imagination on top of it (``ls_imagine``, ``affordance``), with their
shared pieces (``rssm`` networks, ``twohot`` symlog heads, ``returns`` lambda returns) and the
imagination and affordance GIFs of a state (``gifs``)."""
