/* SPDX-License-Identifier: MIT */
/*
 * runner.c: the chooser of runner.h: which runner runs an app. The only
 * file that names the runners (runner_int.h).
 */
#include "common/accel_setup.h"
#include "daemon/node/runtime/runner.h"

#include <pthread.h>

#include "daemon/node/runtime/runner_int.h"

/* Every runner, for sweep and tick. */
static const struct runner *const runners[] = {&runner_process,
                                               &runner_container};

const struct runner *runner_for(const struct manifest *m)
{
    return m->run.ctr.image != NULL ? &runner_container : &runner_process;
}

const struct runner *runner_of(const struct app *a)
{
    return a != NULL ? runner_for(&a->m) : &runner_process;
}

const struct runner *runner_named(struct accel_daemon *d, const char *name)
{
    const struct runner *r;

    pthread_mutex_lock(&d->lock);
    r = runner_of(state_app_find(d, name));
    pthread_mutex_unlock(&d->lock);
    return r;
}

const struct runner *runner_each(size_t i)
{
    return i < sizeof runners / sizeof *runners ? runners[i] : NULL;
}
