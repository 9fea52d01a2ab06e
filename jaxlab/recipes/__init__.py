"""Runnable methods: one module per recipe, registered on import.

Each recipe is named in pyproject.toml's ``jaxlab.recipes`` entry points (name -> module), so
``jaxlab.core.recipe.get`` finds and imports it by name without ``core`` importing this package,
and without importing every family to list the recipes.
"""
