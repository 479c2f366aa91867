"""Document filters, and the chain that runs them and counts what each removed.

Each filter is a small frozen dataclass of `parameters.Parameters`: its fields are its
parameters, checked when it is made (a wrong name, type or range is an `AttrError` naming
the valid ones, which the loader turns into an error at the BUILD line), and `apply`
returns the document kept (rewritten, for the C4 rules, which drop lines) or the reason it
is rejected, a short fixed phrase so that counts by reason stay readable. Filters are made
from JSON-like specs, `{"name": "gopher_quality", "min_words": 100}`, by `make_filter`;
`Filter.to_json` gives back every parameter, defaults included, which is what a step's key
holds.

Defaults follow the papers that published the rules, cited in each filter's docstring.
Words are the whitespace-separated tokens of the text (the papers do not fix a
tokenizer); a line is what lies between newlines, a paragraph what lies between blank
lines. The language filter imports fastText only when it first runs, so loading BUILD
files never imports it.

`base` holds what every filter is, `gopher`, `c4` and `scores` the filters, and `chain`
makes them from specs and runs them in order.
"""
