"""The token-map doctor: read the draft vocabularies serving engines load (formats), check them against a model
(check), repair the unambiguous faults (fix), measure coverage and acceptance side by side (compare, accept).
CLI: python -m core maps check|compare (cli). The maps written for serving: python -m core export (export)."""
