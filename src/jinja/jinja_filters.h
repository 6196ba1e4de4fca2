// src/jinja/jinja_filters.h - what the filter files share: the filter signature, lookups with
// jinja2's semantics (attribute paths, case folding for sorting), and the filters over sequences
// and mappings (jinja_filters_seq.cpp) that the table in jinja_filters.cpp lists.
#pragma once

#include "jinja_eval.h"

#include <string>
#include <vector>

namespace tandem::jinja {

// Defined in jinja_is_tests.cpp.
bool run_test_named(interp &in, const std::string &name, const value &v, call_args &args);

namespace filters {

using filter_fn = value (*)(interp &, const value &, call_args &);

value str_of(interp &in, const value &v);
std::vector<value> as_list(interp &in, const value &v);
value list_value(interp &in, std::vector<value> items);
// jinja2's make_attrgetter: "a.b.0" looks up each part with getitem, integers as indices.
std::vector<value> attr_path(const value &attribute);
value get_attr_path(interp &in, value item, const std::vector<value> &path, const value *dflt);
// Sort keys fold case unless case_sensitive, as jinja2's ignore_case does.
value sort_key(const value &v, bool case_sensitive);
value call_filter_named(interp &in, const std::string &name, const value &v, call_args args);

value f_batch(interp &in, const value &v, call_args &args);
value f_dictsort(interp &in, const value &v, call_args &args);
value f_first(interp &in, const value &v, call_args &args);
value f_last(interp &in, const value &v, call_args &args);
value f_items(interp &in, const value &v, call_args &args);
value f_join(interp &in, const value &v, call_args &args);
value f_length(interp &in, const value &v, call_args &args);
value f_list(interp &in, const value &v, call_args &args);
value f_map(interp &in, const value &v, call_args &args);
value f_max(interp &in, const value &v, call_args &args);
value f_min(interp &in, const value &v, call_args &args);
value f_select(interp &in, const value &v, call_args &args);
value f_reject(interp &in, const value &v, call_args &args);
value f_selectattr(interp &in, const value &v, call_args &args);
value f_rejectattr(interp &in, const value &v, call_args &args);
value f_reverse(interp &in, const value &v, call_args &args);
value f_slice(interp &in, const value &v, call_args &args);
value f_sort(interp &in, const value &v, call_args &args);
value f_sum(interp &in, const value &v, call_args &args);
value f_unique(interp &in, const value &v, call_args &args);

}  // namespace filters
}  // namespace tandem::jinja
