/* SPDX-License-Identifier: MIT */
/*
 * test_state.c: the apps of the shared state (state.h). An app whose
 * install is on its way to etcd (`committing`, d->lock released meanwhile)
 * and that another thread removes (another node's delete applied by the
 * watch) is unlinked from the state but not freed: the installing thread
 * still holds it, finds `removed` set and frees it. Before, the removal
 * freed it under that thread, whose next read crashed an acceld of the
 * randomized fault test (state_app_runs_here in ops_install); under the
 * sanitizers the read below is that use after free.
 */
#include "common/accel_setup.h"
#include "daemon/state.h"

#include <stdlib.h>

#include "common/strmap.h"
#include "common/util.h"
#include "harness.h"

static void daemon_init(struct accel_daemon *d)
{
    *d = (struct accel_daemon){0};
    d->app_index = strmap_new();
    d->owner_index = strmap_new();
}

static void daemon_fini(struct accel_daemon *d)
{
    while (d->napps > 0)
        state_app_remove(d, d->apps[0]);
    free(d->apps);
    for (size_t i = 0; i < d->nowned; i++)
        free(d->owned[i].v);
    free(d->owned);
    strmap_free(d->app_index);
    strmap_free(d->owner_index);
}

static struct app *app_new(const char *name, const char *owner)
{
    struct app *a = xcalloc(1, sizeof(*a));
    a->name = xstrdup(name);
    a->owner = xstrdup(owner);
    a->sel = -1;
    return a;
}

TEST(state_a_committing_app_removed_is_unlinked_not_freed)
{
    static struct accel_daemon d;
    struct app *a = app_new("j0", "alice"), *b = app_new("j1", "alice");
    size_t n;

    daemon_init(&d);
    state_app_add(&d, a);
    state_app_add(&d, b);
    a->committing = true;
    state_app_remove(&d, a); /* another node deleted it meanwhile */
    ASSERT(state_app_find(&d, "j0") == NULL);
    ASSERT(state_app_find(&d, "j1") == b);
    ASSERT_EQ(d.napps, 1);
    state_owned(&d, "alice", &n);
    ASSERT_EQ(n, 1);
    /* the installing thread, back under the lock */
    ASSERT(a->removed);
    a->committing = false;
    state_app_free(a);
    daemon_fini(&d);
}

TEST(state_an_app_removed_otherwise_is_gone)
{
    static struct accel_daemon d;
    struct app *a = app_new("j0", "alice");

    daemon_init(&d);
    state_app_add(&d, a);
    state_app_remove(&d, a); /* freed: the sanitizers see no leak */
    ASSERT(state_app_find(&d, "j0") == NULL);
    ASSERT_EQ(d.napps, 0);
    daemon_fini(&d);
}

#define LIST(XX)                                                               \
    XX(state_a_committing_app_removed_is_unlinked_not_freed)                   \
    XX(state_an_app_removed_otherwise_is_gone)
TEST_MAIN(LIST)
