"""Commands that join families (e.g. ``lm`` models with ``decoding`` algorithms); they import
families and ``core``, never ``cli`` or a recipe module."""
