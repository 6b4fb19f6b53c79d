// Stopping a run on a signal without losing it: SIGINT (Ctrl-C), SIGTERM (Slurm's time
// limit, preemption, kill) and SIGUSR1 (Slurm's --signal) ask the run to stop; the training
// loop (host/run.h) finishes the step it is in, writes a checkpoint and exits. A second signal
// ends the process at once: checkpoint files are written to "<name>.tmp" and renamed
// (host/checkpoint.h), so the previous checkpoint stays whole.
//
// The handler only records the signal (and writes one line with write(2)); everything else
// happens in the loop. A signal reaches one process only: the replicas learn of it together
// in the step's scalar all-reduce (Comm::step_means), so all of them stop after the same step.
#pragma once
#include <signal.h>
#include <unistd.h>

#include <csignal>
#include <cstring>

namespace stop_signal_detail {
// A signal handler can reach nothing else: this is the one place that holds it.
inline volatile std::sig_atomic_t received = 0;  // the first signal's number, 0 = none

inline void write_line(const char* s) {
    ssize_t ignored = write(STDERR_FILENO, s, strlen(s));
    (void)ignored;
}

inline void on_signal(int sig) {
    if (received) {  // the second: end now; the checkpoint being written is a .tmp file
        write_line("\nsecond signal: exiting at once; the previous checkpoint is intact\n");
        _exit(128 + sig);
    }
    received = sig;
    write_line("\nsignal received: stopping after this step, with a checkpoint (a second signal exits at once)\n");
}
}  // namespace stop_signal_detail

inline const int STOP_SIGNALS[] = {SIGINT, SIGTERM, SIGUSR1};

// From now on the stop signals ask the run to stop instead of ending it.
inline void catch_stop_signals() {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = stop_signal_detail::on_signal;
    sigemptyset(&sa.sa_mask);
    for (int sig : STOP_SIGNALS) sigaddset(&sa.sa_mask, sig);  // one handler at a time
    sa.sa_flags = SA_RESTART;                                  // reads and writes carry on
    for (int sig : STOP_SIGNALS) sigaction(sig, &sa, nullptr);
}

// The flag Comm::step_means reads: non-zero once this process has been asked to stop.
inline const volatile std::sig_atomic_t* stop_request() { return &stop_signal_detail::received; }

// The signal this process received (0: none; the run may still stop for another replica's).
inline int stop_signal_received() { return stop_signal_detail::received; }
