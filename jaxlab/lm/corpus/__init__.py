"""The shipped byte-level LM corpus (see README.md here); load it with
:func:`jaxlab.lm.data.load_corpus`."""
