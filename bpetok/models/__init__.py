"""Tokenizer models, named after ``tokenizer.ggml.model``: what turns a pre-tokenized piece into ids."""
