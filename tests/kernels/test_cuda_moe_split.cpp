// tests/kernels/test_cuda_moe_split.cpp - the tensor-parallel expert split kernels (cuda/moe_split.h)
// against their CPU twin, written out here: keep the groups of held experts in order with their
// pairs, remapped to local matrix indices; take the partner's output for every other pair.
#include "gpu_test_util.h"
#include "routing_test_util.h"

#include "cuda/moe.h"
#include "cuda/moe_split.h"

#include <algorithm>
#include <cstring>

using namespace tandem;
using namespace tandem::test;

TEST_CASE("moe_groups_filter keeps the held experts' groups and pairs in order", "[gpu][kernels][moe_split]") {
    if (!gpu_present()) return;
    std::mt19937_64 rng(7);
    struct shape { int32_t n, ne, k; };
    for (const shape sh : {shape{1, 8, 2}, shape{5, 16, 4}, shape{16, 128, 8}, shape{37, 64, 8}, shape{300, 128, 8}}) {
        INFO("rows " << sh.n << " experts " << sh.ne << " k " << sh.k);
        const int32_t max_groups = cuda::moe_max_groups(sh.n, sh.ne, sh.k);
        const size_t pairs = size_t(sh.n) * size_t(sh.k);
        // Router logits with ties, one padding row.
        std::vector<float> logits(size_t(sh.n) * size_t(sh.ne));
        for (float &v : logits) v = float(int(rng() % 7)) * 0.25f;
        std::vector<int32_t> slots(size_t(sh.n));
        for (int32_t r = 0; r < sh.n; ++r) slots[size_t(r)] = (r == sh.n / 2 && sh.n > 1) ? -1 : r;
        const device_routing route(logits, slots, sh.ne, sh.k);
        route.run();
        const device_buffer<int32_t> &g_exp = route.group_expert, &g_off = route.group_off, &g_n = route.n_groups;
        const device_buffer<int32_t> &p_x = route.pair_x, &p_y = route.pair_y;
        // A random half of the experts is held here, in a random local order.
        std::vector<int32_t> local(size_t(sh.ne), -1), held;
        for (int32_t e = 0; e < sh.ne; ++e)
            if (rng() % 2) held.push_back(e);
        std::shuffle(held.begin(), held.end(), rng);
        for (size_t i = 0; i < held.size(); ++i) local[size_t(held[i])] = int32_t(i);
        device_buffer<int32_t> d_local(local), o_mat(size_t(sh.ne)), o_off(size_t(sh.ne) + 1), o_n(1), o_x(pairs), o_y(pairs);
        o_mat.poison();
        o_off.poison();
        cuda::moe_groups_filter_args fa;
        fa.group_expert = g_exp.ptr;
        fa.group_off = g_off.ptr;
        fa.n_groups = g_n.ptr;
        fa.pair_x = p_x.ptr;
        fa.pair_y = p_y.ptr;
        fa.local = d_local.ptr;
        fa.out_group_mat = o_mat.ptr;
        fa.out_group_off = o_off.ptr;
        fa.out_n_groups = o_n.ptr;
        fa.out_pair_x = o_x.ptr;
        fa.out_pair_y = o_y.ptr;
        fa.max_groups = max_groups;
        cuda::moe_groups_filter(fa, nullptr);
        TANDEM_CUDA_CHECK(cudaDeviceSynchronize());

        // CPU twin over moe_route's grouping.
        const auto ge = g_exp.download(), go = g_off.download(), gx = p_x.download(), gy = p_y.download();
        const int32_t ng = g_n.download()[0];
        std::vector<int32_t> mat, off{0}, px, py;
        for (int32_t g = 0; g < ng; ++g) {
            if (local[size_t(ge[size_t(g)])] < 0) continue;
            mat.push_back(local[size_t(ge[size_t(g)])]);
            for (int32_t i = go[size_t(g)]; i < go[size_t(g) + 1]; ++i) {
                px.push_back(gx[size_t(i)]);
                py.push_back(gy[size_t(i)]);
            }
            off.push_back(int32_t(px.size()));
        }
        const int32_t got_n = o_n.download()[0];
        REQUIRE(got_n == int32_t(mat.size()));
        const auto om = o_mat.download(), oo = o_off.download(), ox = o_x.download(), oy = o_y.download();
        CHECK(std::equal(mat.begin(), mat.end(), om.begin()));
        CHECK(std::equal(off.begin(), off.end(), oo.begin()));
        CHECK(std::equal(px.begin(), px.end(), ox.begin()));
        CHECK(std::equal(py.begin(), py.end(), oy.begin()));
    }
}

TEST_CASE("moe_pairs_merge takes the partner's output exactly for pairs it does not hold", "[gpu][kernels][moe_split]") {
    if (!gpu_present()) return;
    std::mt19937_64 rng(9);
    const int32_t n = 19, k = 8, ne = 32, d = 260;
    const size_t pairs = size_t(n) * k;
    std::vector<int32_t> ids(pairs), slots(static_cast<size_t>(n)), local(static_cast<size_t>(ne), -1);
    for (auto &e : ids) e = int32_t(rng() % uint64_t(ne));
    for (int32_t r = 0; r < n; ++r) slots[size_t(r)] = r == 3 ? -1 : r;
    for (int32_t e = 0; e < ne; e += 2) local[size_t(e)] = e / 2;
    const auto mine = random_floats(rng, pairs * d), theirs = random_floats(rng, pairs * d);
    device_buffer<float> d_out(mine), d_other(theirs);
    device_buffer<int32_t> d_ids(ids), d_slots(slots), d_local(local);
    cuda::moe_pairs_merge_args a;
    a.out = d_out.ptr;
    a.other = d_other.ptr;
    a.ids = d_ids.ptr;
    a.slots = d_slots.ptr;
    a.local = d_local.ptr;
    a.n_rows = n;
    a.k = k;
    a.d_model = d;
    cuda::moe_pairs_merge(a, nullptr);
    const auto got = d_out.download();
    size_t taken = 0;
    for (size_t p = 0; p < pairs; ++p) {
        const bool from_partner = slots[p / k] >= 0 && local[size_t(ids[p])] < 0;
        taken += from_partner;
        const float *want = (from_partner ? theirs : mine).data() + p * d;
        CHECK(std::memcmp(got.data() + p * d, want, d * sizeof(float)) == 0);
    }
    CHECK(taken > 0);
}
