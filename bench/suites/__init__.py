"""One module per benchmark suite, each with main(argv); bench/registry.py names them."""
