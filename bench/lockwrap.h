/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Forced into every file of belprobe (gcc -include): the userspace core's
 * locks (bel_spinlock_t and bel_mutex_t are pthread mutexes there, see
 * kmod/core/bel_env.h) go through timing wrappers that record how long each
 * lock is held. <pthread.h> comes first, so that bel_env.h's own include of
 * it is a no-op and its bel_spin_lock() expands to the wrapper.
 */
#ifndef BELBENCH_LOCKWRAP_H
#define BELBENCH_LOCKWRAP_H
#define _GNU_SOURCE
#include <pthread.h>
int lh_lock(pthread_mutex_t *m);
int lh_unlock(pthread_mutex_t *m);
#define pthread_mutex_lock(m) lh_lock(m)
#define pthread_mutex_unlock(m) lh_unlock(m)
#endif
