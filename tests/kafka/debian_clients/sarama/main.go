// Command sarama runs Debian's Sarama (golang-github-shopify-sarama-dev 1.22) against Kafka
// brokers, for tests/kafka/test_debian_clients.py. Each command prints JSON lines on stdout
// and exits 1 with the error on stderr.
//
//	sarama [-brokers H:P,...] [-version 2.2.0] create-topic TOPIC PARTITIONS
//	sarama ... produce TOPIC N          one {"partition","offset"} per record
//	sarama ... consume GROUP TOPIC N    one {"partition","offset","key","value"} per record,
//	                                    then the group's committed offsets {"committed":{...}}
//	sarama ... offsets TOPIC            one {"partition","oldest","newest"} per partition
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Shopify/sarama"
)

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9093", "bootstrap brokers, comma separated")
	version := flag.String("version", sarama.MaxVersion.String(), "the Kafka version Sarama assumes")
	timeout := flag.Duration("timeout", 30*time.Second, "the whole command's time limit")
	flag.Parse()
	config := sarama.NewConfig()
	var err error
	if config.Version, err = sarama.ParseKafkaVersion(*version); err != nil {
		fail(err)
	}
	config.ClientID = "debian-sarama"
	// Single-replica test topics: acks=all answers at once.
	config.Producer.RequiredAcks = sarama.WaitForAll
	config.Producer.Return.Successes = true
	config.Consumer.Offsets.Initial = sarama.OffsetOldest
	config.Consumer.Return.Errors = true
	config.Metadata.Retry.Backoff = 100 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	addrs := strings.Split(*brokers, ",")
	args := flag.Args()
	if len(args) == 0 {
		fail(fmt.Errorf("a command: create-topic, produce, consume, offsets"))
	}
	switch {
	case args[0] == "create-topic" && len(args) == 3:
		err = createTopic(addrs, config, args[1], number(args[2]))
	case args[0] == "produce" && len(args) == 3:
		err = produce(addrs, config, args[1], number(args[2]))
	case args[0] == "consume" && len(args) == 4:
		err = consume(ctx, addrs, config, args[1], args[2], number(args[3]))
	case args[0] == "offsets" && len(args) == 2:
		err = offsets(addrs, config, args[1])
	default:
		err = fmt.Errorf("unknown command or arguments: %q", args)
	}
	if err != nil {
		fail(err)
	}
}

func createTopic(addrs []string, config *sarama.Config, topic string, partitions int) error {
	admin, err := sarama.NewClusterAdmin(addrs, config)
	if err != nil {
		return err
	}
	defer admin.Close()
	detail := &sarama.TopicDetail{NumPartitions: int32(partitions), ReplicationFactor: 1}
	if err := admin.CreateTopic(topic, detail, false); err != nil {
		return err
	}
	emit(map[string]interface{}{"created": topic})
	return nil
}

func produce(addrs []string, config *sarama.Config, topic string, n int) error {
	producer, err := sarama.NewSyncProducer(addrs, config)
	if err != nil {
		return err
	}
	defer producer.Close()
	for i := 0; i < n; i++ {
		partition, offset, err := producer.SendMessage(&sarama.ProducerMessage{
			Topic: topic,
			Key:   sarama.StringEncoder(fmt.Sprintf("key-%d", i)),
			Value: sarama.StringEncoder(fmt.Sprintf("value-%d", i)),
		})
		if err != nil {
			return err
		}
		emit(map[string]interface{}{"partition": partition, "offset": offset})
	}
	return nil
}

// reader is a consumer group handler that reads until `left` records were seen, marking each
// one (committed by the offset manager when the session ends) and then ends the session.
type reader struct {
	mu   sync.Mutex
	left int
	done context.CancelFunc
}

func (r *reader) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (r *reader) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (r *reader) ConsumeClaim(session sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for message := range claim.Messages() {
		r.mu.Lock()
		if r.left > 0 {
			emit(map[string]interface{}{
				"partition": message.Partition, "offset": message.Offset,
				"key": string(message.Key), "value": string(message.Value),
			})
			session.MarkMessage(message, "")
			r.left--
		}
		if r.left == 0 {
			r.done()
		}
		r.mu.Unlock()
	}
	return nil
}

func consume(ctx context.Context, addrs []string, config *sarama.Config, group, topic string, n int) error {
	client, err := sarama.NewClient(addrs, config)
	if err != nil {
		return err
	}
	defer client.Close()
	consumer, err := sarama.NewConsumerGroupFromClient(group, client)
	if err != nil {
		return err
	}
	session, done := context.WithCancel(ctx)
	handler := &reader{left: n, done: done}
	go func() {
		for err := range consumer.Errors() {
			fmt.Fprintln(os.Stderr, "consumer group:", err)
		}
	}()
	for session.Err() == nil {
		if err := consumer.Consume(session, []string{topic}, handler); err != nil {
			consumer.Close()
			return err
		}
	}
	// Closing the group flushes the marked offsets (OffsetCommit) and leaves it.
	if err := consumer.Close(); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%d records still unread: %v", handler.left, ctx.Err())
	}
	return committed(addrs, client, config, group, topic)
}

func committed(addrs []string, client sarama.Client, config *sarama.Config, group, topic string) error {
	partitions, err := client.Partitions(topic)
	if err != nil {
		return err
	}
	admin, err := sarama.NewClusterAdmin(addrs, config)
	if err != nil {
		return err
	}
	defer admin.Close()
	response, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: partitions})
	if err != nil {
		return err
	}
	found := map[string]int64{}
	for _, partition := range partitions {
		block := response.GetBlock(topic, partition)
		if block == nil || block.Err != sarama.ErrNoError {
			return fmt.Errorf("no committed offset of partition %d: %v", partition, block)
		}
		found[strconv.Itoa(int(partition))] = block.Offset
	}
	emit(map[string]interface{}{"committed": found})
	return nil
}

func offsets(addrs []string, config *sarama.Config, topic string) error {
	client, err := sarama.NewClient(addrs, config)
	if err != nil {
		return err
	}
	defer client.Close()
	partitions, err := client.Partitions(topic)
	if err != nil {
		return err
	}
	for _, partition := range partitions {
		oldest, err := client.GetOffset(topic, partition, sarama.OffsetOldest)
		if err != nil {
			return err
		}
		newest, err := client.GetOffset(topic, partition, sarama.OffsetNewest)
		if err != nil {
			return err
		}
		emit(map[string]interface{}{"partition": partition, "oldest": oldest, "newest": newest})
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
