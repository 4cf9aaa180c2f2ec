// The label keys AntDT writes on the objects it creates and reads back from
// them and from nodes: one spelling each, so a reader and a writer cannot
// drift. Values are AntDT's own (a role is "worker", "ps" or "sharding").
#pragma once

namespace antdt::vocab {

// On every child of a job (pods, Services, claims, the PodGroup): the job's name.
inline constexpr char kLabelJob[] = "antdt.io/job";
// On a job's pods: "worker", "ps" or "sharding".
inline constexpr char kLabelRole[] = "antdt.io/role";
// On a worker's pod: the member it runs ("worker-3").
inline constexpr char kLabelWorkerId[] = "antdt.io/worker-id";
// On a member's pod: the incarnation it runs (0 first, one more per restart).
inline constexpr char kLabelIncarnation[] = "antdt.io/incarnation";
// On a parameter server's pod: its index K (of "ps-K").
inline constexpr char kLabelReplicaIndex[] = "antdt.io/replica-index";
// On the operator's pod while it is the leader.
inline constexpr char kLabelLeader[] = "antdt.io/leader";
// On a node (an agent reports its node's labels): its hardware class, and
// its device's speed relative to the job's fastest (the Monitor's prior).
inline constexpr char kLabelHardware[] = "antdt.io/hardware";
inline constexpr char kLabelDeviceSpeed[] = "antdt.io/device-speed";

}  // namespace antdt::vocab
