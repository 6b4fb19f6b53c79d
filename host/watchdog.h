// The watchdog of the replicas' collectives (host/comm.h): a frozen replica ends the job
// instead of hanging it.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "error.h"

// ---- the watchdog: a frozen replica ends the job instead of hanging it
//
// In a collective every rank waits until all have joined. One that never joins (stopped by
// SIGSTOP, deadlocked, on a node that died without closing its connections) would keep all
// the others waiting forever. A backend that can start its collectives without blocking
// (MPI's non-blocking collectives; NCCL's are asynchronous anyway) hands the waiting to a
// Watchdog. When a collective has not completed within the timeout, the watchdog holds a
// roll call over a side channel that needs no collective: it asks every rank, each rank
// that is waiting in a collective answers, and those that stay silent are the ones that
// did not arrive. It reports them as an Error, which main_with_errors() prints as one line
// before it ends the job. When several ranks time out together, the lowest one reports and
// the others stay quiet (unless it fails to end the job), so the job prints one line.

// The roll call's side channel, one per backend: small messages that must not block.
struct RollCall {
    struct Notice {
        enum Kind { REQUEST, REPLY } kind;
        int rank;             // the sender
        long long id;         // REQUEST: the requester's collective number; REPLY: the id it answers
        char waiting_in[64];  // the sender's collective, e.g. "all-reduce of 4,096 bytes (collective 12)"
    };
    virtual ~RollCall() = default;
    virtual void send(int to_rank, const Notice& notice) = 0;  // without blocking
    virtual std::vector<Notice> receive() = 0;                 // what has arrived, without blocking
};

struct WatchdogSettings {
    double timeout_s = 600;           // --comm-timeout; 0 waits forever
    std::vector<std::string> places;  // each rank's "host, pid N", for the report; may be empty
};

// Without a roll call (roll_call null) the watchdog still ends the job at the timeout, but
// cannot say which rank is missing.
class Watchdog {
public:
    Watchdog(int rank, int world, RollCall* roll_call) : rank_(rank), world_(world), roll_call_(roll_call) {}
    WatchdogSettings settings;

    // Waits for one collective: `done()` tests it (and drives its progress); `op` and
    // `bytes` describe it for the report. Returns when done() is true; throws Error when the
    // watchdog ends the job.
    template <class Done>
    void wait(const char* op, size_t bytes, Done&& done) {
        using Clock = std::chrono::steady_clock;
        auto seconds_since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
        const long long id = ++collectives_;
        const Clock::time_point start = Clock::now();
        Clock::time_point asked_at{}, next_look = start;
        bool asked = false, lower_rank_asked = false;
        std::vector<std::string> answers(world_);  // who answered this rank's roll call, and where they wait
        RollCall::Notice mine{RollCall::Notice::REPLY, rank_, id, {}};
        snprintf(mine.waiting_in, sizeof mine.waiting_in, "%s of %s bytes (collective %lld)", op,
                 with_commas((long long)bytes).c_str(), id);
        const double timeout = settings.timeout_s, grace = std::min(timeout, 2.0);
        while (!done()) {
            // past a second this is a wait for a straggler, not for bandwidth: stop spinning.
            // Before it, give the core away between tests: where ranks outnumber cores (hosts
            // sharing a machine), a spinning rank takes the time another needs to move bytes
            if (seconds_since(start) > 1.0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
            else std::this_thread::yield();
            if (timeout <= 0 || Clock::now() < next_look) continue;
            next_look = Clock::now() + std::chrono::milliseconds(10);
            if (!roll_call_) {
                if (seconds_since(start) > timeout)
                    throw Error(strf("the %s did not complete within --comm-timeout %g s (this backend cannot tell "
                                     "which rank did not arrive); ending the job",
                                     mine.waiting_in, timeout));
                continue;
            }
            for (const RollCall::Notice& n : roll_call_->receive()) {
                if (n.rank < 0 || n.rank >= world_) continue;
                if (n.kind == RollCall::Notice::REQUEST) {  // someone's roll call: say where this rank waits
                    RollCall::Notice reply = mine;
                    reply.id = n.id;
                    roll_call_->send(n.rank, reply);
                    lower_rank_asked = lower_rank_asked || n.rank < rank_;
                } else if (asked && n.id == id) {
                    answers[n.rank] = std::string(n.waiting_in, strnlen(n.waiting_in, sizeof n.waiting_in));
                }
            }
            if (!asked && seconds_since(start) > timeout) {  // time is up: ask every rank
                RollCall::Notice request = mine;
                request.kind = RollCall::Notice::REQUEST;
                for (int r = 0; r < world_; r++)
                    if (r != rank_) roll_call_->send(r, request);
                asked = true, asked_at = Clock::now();
            }
            if (asked && seconds_since(asked_at) > (lower_rank_asked ? 4 * grace : grace))
                throw Error(report(mine.waiting_in, answers));
        }
    }

private:
    std::string place(int r) const {
        return r < (int)settings.places.size() ? strf("rank %d (%s)", r, settings.places[r].c_str()) : strf("rank %d", r);
    }
    // "rank 1 (node7, pid 123) did not arrive at the all-reduce of ... within --comm-timeout 5 s ..."
    std::string report(const std::string& collective, const std::vector<std::string>& answers) const {
        std::string missing, elsewhere;
        int n_missing = 0;
        for (int r = 0; r < world_; r++) {
            if (r == rank_) continue;
            if (answers[r].empty()) missing += (n_missing++ ? ", " : "") + place(r);
            else if (answers[r] != collective && elsewhere.size() < 200)
                elsewhere += strf("; rank %d waits in the %s", r, answers[r].c_str());
        }
        std::string timeout = strf("--comm-timeout %g s", settings.timeout_s);
        if (n_missing == 0)
            return strf("the %s did not complete within %s, although every rank is waiting in a collective%s; "
                        "ending the job",
                        collective.c_str(), timeout.c_str(), elsewhere.c_str());
        return strf("%s did not arrive at the %s within %s (stopped, hung or dead?)%s; ending the job",
                    missing.c_str(), collective.c_str(), timeout.c_str(), elsewhere.c_str());
    }

    int rank_, world_;
    RollCall* roll_call_;
    long long collectives_ = 0;  // collectives waited for so far: the same count on every rank
};
