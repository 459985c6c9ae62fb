// Command kafkago runs Debian's kafka-go (golang-github-segmentio-kafka-go-dev 0.2.1) against
// Kafka brokers, for tests/kafka/test_debian_clients.py. Each command prints JSON lines on
// stdout and exits 1 with the error on stderr.
//
//	kafkago [-brokers H:P,...] create-topic TOPIC PARTITIONS
//	kafkago ... produce TOPIC N          {"written": N} once every record was acknowledged
//	kafkago ... consume GROUP TOPIC N    one {"partition","offset","key","value"} per record,
//	                                     each committed before the next is read
//	kafkago ... offsets TOPIC            one {"partition","first","last"} per partition
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	kafka "github.com/segmentio/kafka-go"
)

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9093", "bootstrap brokers, comma separated")
	timeout := flag.Duration("timeout", 30*time.Second, "the whole command's time limit")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	addrs := strings.Split(*brokers, ",")
	args := flag.Args()
	if len(args) == 0 {
		fail(fmt.Errorf("a command: create-topic, produce, consume, offsets"))
	}
	var err error
	switch {
	case args[0] == "create-topic" && len(args) == 3:
		err = createTopic(addrs[0], args[1], number(args[2]))
	case args[0] == "produce" && len(args) == 3:
		err = produce(ctx, addrs, args[1], number(args[2]))
	case args[0] == "consume" && len(args) == 4:
		err = consume(ctx, addrs, args[1], args[2], number(args[3]))
	case args[0] == "offsets" && len(args) == 2:
		err = offsets(ctx, addrs[0], args[1])
	default:
		err = fmt.Errorf("unknown command or arguments: %q", args)
	}
	if err != nil {
		fail(err)
	}
}

func createTopic(broker, topic string, partitions int) error {
	conn, err := kafka.Dial("tcp", broker)
	if err != nil {
		return err
	}
	defer conn.Close()
	config := kafka.TopicConfig{Topic: topic, NumPartitions: partitions, ReplicationFactor: 1}
	if err := conn.CreateTopics(config); err != nil {
		return err
	}
	emit(map[string]interface{}{"created": topic})
	return nil
}

func produce(ctx context.Context, addrs []string, topic string, n int) error {
	writer := kafka.NewWriter(kafka.WriterConfig{
		Brokers:      addrs,
		Topic:        topic,
		Balancer:     &kafka.Hash{},
		BatchTimeout: 10 * time.Millisecond,
		RequiredAcks: -1,
	})
	defer writer.Close()
	messages := make([]kafka.Message, n)
	for i := range messages {
		messages[i] = kafka.Message{
			Key:   []byte(fmt.Sprintf("key-%d", i)),
			Value: []byte(fmt.Sprintf("value-%d", i)),
		}
	}
	if err := writer.WriteMessages(ctx, messages...); err != nil {
		return err
	}
	emit(map[string]interface{}{"written": n})
	return nil
}

func consume(ctx context.Context, addrs []string, group, topic string, n int) error {
	reader := kafka.NewReader(kafka.ReaderConfig{
		Brokers:        addrs,
		GroupID:        group,
		Topic:          topic,
		MaxWait:        200 * time.Millisecond,
		CommitInterval: 0, // CommitMessages answers once the pod answered the OffsetCommit
	})
	defer reader.Close()
	for i := 0; i < n; i++ {
		message, err := reader.FetchMessage(ctx)
		if err != nil {
			return fmt.Errorf("after %d records: %v", i, err)
		}
		emit(map[string]interface{}{
			"partition": message.Partition, "offset": message.Offset,
			"key": string(message.Key), "value": string(message.Value),
		})
		if err := reader.CommitMessages(ctx, message); err != nil {
			return err
		}
	}
	return nil
}

func offsets(ctx context.Context, broker, topic string) error {
	conn, err := kafka.Dial("tcp", broker)
	if err != nil {
		return err
	}
	partitions, err := conn.ReadPartitions(topic)
	conn.Close()
	if err != nil {
		return err
	}
	for _, partition := range partitions {
		leader, err := kafka.DialLeader(ctx, "tcp", broker, topic, partition.ID)
		if err != nil {
			return err
		}
		first, last, err := leader.ReadOffsets()
		leader.Close()
		if err != nil {
			return err
		}
		emit(map[string]interface{}{"partition": partition.ID, "first": first, "last": last})
	}
	return nil
}

func number(text string) int {
	n, err := strconv.Atoi(text)
	if err != nil {
		fail(err)
	}
	return n
}

func emit(value interface{}) {
	line, _ := json.Marshal(value)
	fmt.Println(string(line))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "error:", err)
	os.Exit(1)
}
